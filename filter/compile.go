package main

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	bpf "github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/tracefs"
)

// Arg is a kprobe argument (or "ret" of a kretprobe): its BTF type and
// the pt_regs offset of the register that holds it at the probe.
type Arg struct {
	Name   string
	Type   btf.Type
	RegOff int16
}

// Target is what an expression is compiled against.
type Target struct {
	Format    *tracefs.Format // a tracepoint's fields
	Args      []Arg           // a kprobe's arguments
	BTF       *btf.Spec       // struct layouts, for casts and walks
	ProbeRead bpf.BuiltinFunc // bpf_probe_read_kernel, or bpf_probe_read before 5.5
}

// Stack layout of the filter program.
const (
	scratchOff = -8  // probe-read target of integers and pointers
	strOff     = -80 // probe-read target of strings (up to maxString+1 bytes)
	maxString  = 63
	countKey   = -84
)

type compiler struct {
	t     Target
	expr  string
	insns bpf.Instructions
	n     int // label counter
}

func (c *compiler) errAt(pos int, format string, args ...any) error {
	return &ExprError{Expr: c.expr, Pos: pos, Msg: fmt.Sprintf(format, args...)}
}

func (c *compiler) label(s string) string {
	c.n++
	return fmt.Sprintf("%s%d", s, c.n)
}

func (c *compiler) emit(insns ...bpf.Instruction) { c.insns = append(c.insns, insns...) }

// Compile turns parsed comparisons into a filter program: return 1 keeps the
// event (the kernel stores it), 0 discards it. With count, kept events are
// counted in slot 0 of the per-CPU array "count" and discarded.
func Compile(expr string, cmps []Cmp, t Target, count bool) (bpf.Instructions, error) {
	c := &compiler{t: t, expr: expr}
	c.emit(asm.Prologue()...)
	for _, cmp := range cmps {
		if err := c.cmp(cmp); err != nil {
			return nil, err
		}
	}
	if count {
		c.emit(bpf.Mov.Imm(bpf.R1, 0).WithSource(bpf.Comment("every comparison held: count the event")),
			asm.StoreKey(countKey, bpf.R1, bpf.Word))
		c.emit(asm.PerCPUArrayIncrement("count", "count", countKey)...)
		c.emit(bpf.Ja.Label("reject"))
	} else {
		c.emit(bpf.Mov.Imm(bpf.R0, 1).WithSource(bpf.Comment("every comparison held: keep the event")), bpf.Return())
	}
	// Only where something jumps to it: the verifier refuses unreachable
	// instructions (no --where; a != that always holds).
	for _, ins := range c.insns {
		if ins.Reference() == "reject" {
			c.emit(asm.Return("reject", 0)...)
			break
		}
	}
	return c.insns, nil
}

// flipped is the operator with its operands swapped (3 < x is x > 3).
var flipped = map[string]string{"==": "==", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}

func (c *compiler) cmp(cmp Cmp) error {
	path, lit, op := cmp.Left, cmp.Right, cmp.Op
	if path.IsInt || path.IsString {
		path, lit, op = lit, path, flipped[op]
	}
	if path.IsInt || path.IsString {
		return c.errAt(cmp.Left.Pos, "compare a field with a constant: both sides are constants")
	}
	if !lit.IsInt && !lit.IsString {
		return c.errAt(lit.Pos, "comparing two fields is not supported: compare a field with a number or a string")
	}
	start := len(c.insns)
	defer func() {
		// The comparison's text rides on its first instruction.
		if start < len(c.insns) {
			note := c.describe(cmp)
			if src := c.insns[start].Source(); src != nil {
				note += "; " + src.String()
			}
			c.insns[start] = c.insns[start].WithSource(bpf.Comment(note))
		}
	}()
	v, err := c.resolve(path)
	if err != nil {
		return err
	}
	switch v.kind {
	case kString:
		if !lit.IsString {
			return c.errAt(lit.Pos, "%s is a string: compare it with a string literal", v.name)
		}
		if op != "==" && op != "!=" {
			return c.errAt(cmp.OpPos, "strings compare only with == and !=")
		}
		return c.stringCmp(v, lit, op)
	case kInt:
		if lit.IsString {
			val, ok := symbolic(v, lit.Str)
			if !ok {
				return c.errAt(lit.Pos, "%s is a number: compare it with a number%s", v.name, symbolicHint(v))
			}
			lit = Operand{IsInt: true, Int: val, Pos: lit.Pos}
		}
		return c.intCmp(v, lit, op)
	}
	return c.errAt(path.Pos, "%s cannot be compared", v.name)
}

// describe is the comparison's own text: from its first operand to the
// next && (or the end).
func (c *compiler) describe(cmp Cmp) string {
	from := min(cmp.Left.Pos, cmp.Right.Pos)
	to := len(c.expr)
	if i := strings.Index(c.expr[from:], "&&"); i >= 0 {
		to = from + i
	}
	return "where " + strings.TrimSpace(c.expr[from:to])
}

type valueKind int

const (
	kInt valueKind = iota
	kString
)

// value is a resolved operand, ready to compare.
type value struct {
	name   string
	kind   valueKind
	signed bool
	size   int
	// Where it is: a tracepoint field (ctxOff), a data_loc string in the
	// record, or an object at the address in R1 (walked).
	ctxOff  int
	dataLoc bool
	walked  bool
	strLen  int               // the string's room, for fixed arrays
	symbols map[uint64]string // __print_symbolic names of an int field
}

// resolve finds what a path denotes and emits code that puts its address in
// R1 when it has to be walked to.
func (c *compiler) resolve(o Operand) (value, error) {
	name := o.Base
	if c.t.Format != nil {
		return c.resolveField(o)
	}
	for i, a := range c.t.Args {
		if a.Name != name {
			continue
		}
		c.emit(bpf.LoadMem(bpf.R1, asm.RegCtx, a.RegOff, bpf.DWord).
			WithSource(bpf.Comment(fmt.Sprintf("r1 = %s (argument %d)", a.Name, i+1))))
		if len(o.Steps) == 0 {
			return scalar(name, a.Type, false)
		}
		return c.walk(o, a.Type)
	}
	var names []string
	for _, a := range c.t.Args {
		names = append(names, a.Name)
	}
	return value{}, c.errAt(o.Pos, "no argument %q (arguments: %s)", name, strings.Join(names, ", "))
}

func (c *compiler) resolveField(o Operand) (value, error) {
	f, ok := c.t.Format.Field(o.Base)
	if !ok {
		return value{}, c.errAt(o.Pos, "event %s has no field %q (fields: %s)", c.t.Format.Name, o.Base, strings.Join(c.t.Format.FieldNames(), ", "))
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
		ld, _ := asm.LoadField(bpf.R1, f.Name, f.Offset, 8, false)
		c.emit(ld...)
		if len(o.Steps) == 0 {
			return value{}, c.errAt(o.Pos, "a cast pointer must be walked: ((struct %s *)%s)->member", o.Cast, f.Name)
		}
		return c.walk(o, &btf.Pointer{Target: st})
	}
	if len(o.Steps) > 0 {
		return value{}, c.errAt(o.Steps[0].Pos-2, "field %s is not a struct pointer that can be walked: cast it, as in ((struct sk_buff *)%s)->len", f.Name, f.Name)
	}
	switch {
	case f.DataLoc:
		return value{name: f.Name, kind: kString, ctxOff: f.Offset, dataLoc: true}, nil
	case f.ArrayLen > 0 && strings.HasPrefix(f.Type, "char"):
		return value{name: f.Name, kind: kString, ctxOff: f.Offset, strLen: f.ArrayLen}, nil
	case f.ArrayLen > 0 || f.Size > 8 || f.Size == 0:
		return value{}, c.errAt(o.Pos, "field %s (%s) is neither a number nor a string", f.Name, f.Type)
	}
	return value{name: f.Name, kind: kInt, signed: f.Signed, size: f.Size, ctxOff: f.Offset, symbols: c.t.Format.Symbolic[f.Name]}, nil
}

func (c *compiler) structByName(name string) (btf.Type, error) {
	var st *btf.Struct
	if err := c.t.BTF.TypeByName(name, &st); err != nil {
		return nil, fmt.Errorf("no struct %s in the kernel's BTF", name)
	}
	return st, nil
}

// scalar describes an argument or walked member of type t.
func scalar(name string, t btf.Type, walked bool) (value, error) {
	switch u := btf.UnderlyingType(t).(type) {
	case *btf.Int:
		return value{name: name, kind: kInt, signed: u.Encoding&btf.Signed != 0, size: int(u.Size), walked: walked}, nil
	case *btf.Enum:
		return value{name: name, kind: kInt, signed: u.Signed, size: int(u.Size), walked: walked}, nil
	case *btf.Pointer:
		return value{name: name, kind: kInt, size: 8, walked: walked}, nil
	case *btf.Array:
		if i, ok := btf.UnderlyingType(u.Type).(*btf.Int); ok && i.Size == 1 {
			return value{name: name, kind: kString, strLen: int(u.Nelems), walked: walked}, nil
		}
	}
	return value{}, fmt.Errorf("%s has type %s, neither a number nor a char array", name, typeName(t))
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
				c.read(8, "")
			}
			p, ok := btf.UnderlyingType(t).(*btf.Pointer)
			if !ok {
				return value{}, c.errAt(s.Pos-2, "%s is %s, not a pointer: '->' cannot walk through it", name, typeName(t))
			}
			t = p.Target
		} else if inReg {
			return value{}, c.errAt(s.Pos-1, "%s is a pointer: use '->'", name)
		}
		off, mt, err := member(t, s.Member)
		if err != nil {
			return value{}, c.errAt(s.Pos, "%s: %v", name, err)
		}
		if off != 0 {
			c.emit(bpf.Add.Imm(bpf.R1, int32(off)).WithSource(bpf.Comment(fmt.Sprintf("r1 = &%s%s%s (offset %d, from BTF)", name, map[bool]string{true: "->", false: "."}[s.Deref], s.Member, off))))
		}
		name += map[bool]string{true: "->", false: "."}[s.Deref] + s.Member
		t, inReg = mt, false
	}
	v, err := scalar(name, t, true)
	if err != nil {
		return value{}, c.errAt(o.Steps[len(o.Steps)-1].Pos, "%v", err)
	}
	return v, nil
}

// member finds a struct or union member by name, looking into anonymous
// members, and returns its byte offset and type.
func member(t btf.Type, name string) (int, btf.Type, error) {
	var members []btf.Member
	switch u := btf.UnderlyingType(t).(type) {
	case *btf.Struct:
		members = u.Members
	case *btf.Union:
		members = u.Members
	default:
		return 0, nil, fmt.Errorf("%s is not a struct: it has no member %q", typeName(t), name)
	}
	for _, m := range members {
		if m.Name == name {
			if m.BitfieldSize != 0 {
				return 0, nil, fmt.Errorf("member %s is a bitfield: not supported", name)
			}
			return int(m.Offset / 8), m.Type, nil
		}
		if m.Name == "" {
			if off, mt, err := member(m.Type, name); err == nil {
				return int(m.Offset/8) + off, mt, nil
			}
		}
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

// read probe-reads size bytes at the address in R1 into the scratch slot
// and loads them into R1 (size 1, 2, 4 or 8), or into the string buffer
// (into != "").
func (c *compiler) read(size int, into string) {
	off := int16(scratchOff)
	if into != "" {
		off = strOff
	}
	c.emit(
		bpf.Mov.Reg(bpf.R3, bpf.R1).WithSource(bpf.Comment(fmt.Sprintf("read %d bytes at r1 with %v", size, c.t.ProbeRead))),
		bpf.Mov.Reg(bpf.R1, bpf.RFP),
		bpf.Add.Imm(bpf.R1, int32(off)),
		bpf.Mov.Imm(bpf.R2, int32(size)),
		c.t.ProbeRead.Call(),
	)
	if into == "" {
		// Loaded at exactly its size: zero-extended, whatever else the slot held.
		c.emit(bpf.LoadMem(bpf.R1, bpf.RFP, off, sizeOf(size)))
	}
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

// intCmp loads the value into R1 and jumps to reject unless "R1 op lit".
// Only JEQ/JNE/JGT/JGE and their signed forms are used (JLT/JLE are 4.14+).
func (c *compiler) intCmp(v value, lit Operand, op string) error {
	if v.size != 1 && v.size != 2 && v.size != 4 && v.size != 8 {
		return c.errAt(lit.Pos, "%s has an unsupported size %d", v.name, v.size)
	}
	if v.walked {
		c.read(v.size, "")
	} else if c.t.Format != nil {
		ld, err := asm.LoadField(bpf.R1, v.name, v.ctxOff, v.size, false)
		if err != nil {
			return err
		}
		c.emit(ld...)
	}
	if shift := int32(64 - 8*v.size); v.signed && v.size < 8 {
		c.emit(bpf.LSh.Imm(bpf.R1, shift), bpf.ArSh.Imm(bpf.R1, shift))
	} else if v.size < 8 && !v.walked && c.t.Format == nil {
		// A register argument narrower than 64 bits: its upper bits are junk.
		c.emit(bpf.LSh.Imm(bpf.R1, shift), bpf.RSh.Imm(bpf.R1, shift))
	}
	if lit.Neg && !v.signed {
		return c.errAt(lit.Pos, "%s is unsigned: it is never negative", v.name)
	}
	val := int64(lit.Int)
	if lit.Neg {
		if lit.Int > 1<<63 {
			return c.errAt(lit.Pos, "number out of range")
		}
		val = -int64(lit.Int)
	}
	if !lit.Neg && v.size < 8 && lit.Int >= 1<<(8*v.size) {
		return c.errAt(lit.Pos, "%d does not fit in %s (%d bytes)", lit.Int, v.name, v.size)
	}
	c.emit(bpf.LoadImm(bpf.R2, val, bpf.DWord))
	type jump struct {
		op      bpf.JumpOp
		swapped bool
	}
	// The jump to reject when the comparison fails.
	var j jump
	switch op {
	case "==":
		j = jump{bpf.JNE, false}
	case "!=":
		j = jump{bpf.JEq, false}
	case "<": // fails if v >= c
		j = jump{bpf.JGE, false}
	case "<=": // fails if v > c
		j = jump{bpf.JGT, false}
	case ">": // fails if c >= v
		j = jump{bpf.JGE, true}
	case ">=": // fails if c > v
		j = jump{bpf.JGT, true}
	default:
		return errors.New("unknown operator " + op)
	}
	if v.signed {
		switch j.op {
		case bpf.JGE:
			j.op = bpf.JSGE
		case bpf.JGT:
			j.op = bpf.JSGT
		}
	}
	if j.swapped {
		c.emit(j.op.Reg(bpf.R2, bpf.R1, "reject"))
	} else {
		c.emit(j.op.Reg(bpf.R1, bpf.R2, "reject"))
	}
	return nil
}

// stringCmp compares a string with a literal byte by byte, the NUL
// terminator included where the string has room for one.
func (c *compiler) stringCmp(v value, lit Operand, op string) error {
	s := lit.Str
	if len(s) > maxString {
		return c.errAt(lit.Pos, "string literals are limited to %d bytes", maxString)
	}
	if strings.IndexByte(s, 0) >= 0 {
		return c.errAt(lit.Pos, "string literal contains a NUL byte")
	}
	n := len(s) + 1 // with the terminator
	if v.strLen > 0 && n > v.strLen {
		if len(s) > v.strLen {
			// Longer than the field: never equal, so != always holds.
			if op == "==" {
				return c.errAt(lit.Pos, "%q is longer than %s (%d bytes): they are never equal", s, v.name, v.strLen)
			}
			return nil
		}
		n = v.strLen // exactly as long: no terminator to check
	}
	// Where the bytes are: the record (ctx) at a constant offset, or the
	// string buffer after a probe read.
	fromCtx := !v.walked && !v.dataLoc
	switch {
	case v.dataLoc:
		c.emit(
			bpf.LoadMem(bpf.R1, asm.RegCtx, int16(v.ctxOff), bpf.Word).WithSource(bpf.Comment(fmt.Sprintf("%s: __data_loc, offset in the low 16 bits", v.name))),
			bpf.And.Imm(bpf.R1, 0xffff),
			bpf.Mov.Reg(bpf.R3, asm.RegCtx),
			bpf.Add.Reg(bpf.R3, bpf.R1),
			bpf.Mov.Reg(bpf.R1, bpf.RFP),
			bpf.Add.Imm(bpf.R1, strOff),
			bpf.Mov.Imm(bpf.R2, int32(n)),
			c.t.ProbeRead.Call(),
		)
	case v.walked:
		c.read(n, "str")
	}
	// ==: the first differing byte rejects. !=: the first differing byte
	// passes (jumps past the comparison); all equal rejects.
	miss := "reject"
	if op == "!=" {
		miss = c.label("ne")
	}
	for i := 0; i < n; i++ {
		var b byte
		if i < len(s) {
			b = s[i]
		}
		if fromCtx {
			c.emit(bpf.LoadMem(bpf.R1, asm.RegCtx, int16(v.ctxOff+i), bpf.Byte))
		} else {
			c.emit(bpf.LoadMem(bpf.R1, bpf.RFP, int16(strOff+i), bpf.Byte))
		}
		c.emit(bpf.JNE.Imm(bpf.R1, int32(b), miss))
	}
	if op == "!=" {
		c.emit(bpf.Ja.Label("reject"), asm.Nop().WithSymbol(miss))
	}
	return nil
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
