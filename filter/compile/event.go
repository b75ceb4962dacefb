package compile

import (
	"fmt"
	"strings"

	bpf "github.com/cilium/ebpf/asm"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/kbtf"
	"github.com/tracekit/tracekit/tracefs"
	"github.com/tracekit/tracekit/uprobe"
)

// Event is the kind of event an expression is compiled against, with its
// own answer to what a name denotes there: a tracepoint's Record, a
// syscall's fields at its wrapper's entry (SyscallEntry), a probe's
// Registers, a trampoline's Slots, a USDT site's arguments. A new kind of
// event is a new Event; the compiler around it does not change.
type Event interface {
	// operand resolves o on the event, emitting the code a walk takes;
	// ok is false where the event has no such name (a builtin may be it).
	operand(c *compiler, o Operand) (v value, ok bool, err error)
	// unknown is the error for a name neither the event nor a builtin has.
	unknown(c *compiler, o Operand) error
	// userSpace: the event's pointers are user addresses.
	userSpace() bool
	// Columns are the operands a record of the event shows by default:
	// every field or argument that has a value.
	Columns() []Operand
	// HasStringPointer reports a char * field or argument, whose string
	// the kernel's own record does not hold.
	HasStringPointer() bool
}

// Record is a tracepoint's record, read at the offsets of its format.
type Record struct {
	Format *tracefs.Format
	// UserSpace: the event's pointers are user addresses (a syscall
	// tracepoint's arguments). Otherwise a string pointer without a __user
	// tag in BTF is read as a user string first, as a kernel one if that
	// fails: on x86-64 and arm64 the two address ranges never overlap.
	UserSpace bool
}

// SyscallEntry is a syscalls:sys_enter_* event read at the entry of the
// syscall's wrapper (fentry) instead of from the tracepoint's record: the
// wrapper's one argument is the user's pt_regs, which holds the syscall's
// arguments (Regs.SyscallArgs, in the format's order) and its number
// (__syscall_nr). Its pointers are user addresses.
type SyscallEntry struct {
	Format *tracefs.Format
	Regs   *asm.Regs
}

// Registers are a kprobe's or uprobe's arguments, each in the register at
// its pt_regs offset (Arg.RegOff). UserSpace: a uprobe's.
type Registers struct {
	Args      []Arg
	UserSpace bool
	// Width is a register's size in bytes (asm.Regs.Width): 4 on 32-bit
	// ARM; 0 is 8, a 64-bit CPU's.
	Width int
}

// Slots are a BPF trampoline's arguments (fentry, fexit), each in a u64
// slot of its context (Arg.RegOff is the slot's offset). The kernel types
// them from BTF: a struct pointer is a pointer to the verifier, which a
// program may compare, store and walk but not take bits of, and a pointer
// to anything but a number, void or a struct cannot be read at all (see
// slotReadable).
type Slots struct {
	Args []Arg
}

// USDT are a USDT call site's arguments, arg0 onwards, as their specs say;
// Site is the site's link-time address (a rip-relative argument is found
// from the instruction pointer, which a uprobe sets to the site) and Regs
// the register layout the specs name registers in.
type USDT struct {
	Args []uprobe.Arg
	Site uint64
	Regs *asm.Regs
}

func (e *Record) operand(c *compiler, o Operand) (value, bool, error) {
	return fieldOperand(c, e.Format, nil, o)
}

func (e *SyscallEntry) operand(c *compiler, o Operand) (value, bool, error) {
	return fieldOperand(c, e.Format, e.Regs, o)
}

// fieldOperand resolves a name on a tracepoint's fields: a field (an
// event's own field wins over a builtin of the same name), bpftrace's
// args->NAME for one, and any name that is not a builtin, for its error.
func fieldOperand(c *compiler, f *tracefs.Format, entry *asm.Regs, o Operand) (value, bool, error) {
	if _, ok := f.Field(o.Base); !ok && o.Base == "args" && len(o.Steps) > 0 {
		o = Operand{Pos: o.Steps[0].Pos, Base: o.Steps[0].Member, Steps: o.Steps[1:]}
		v, err := c.resolveField(f, entry, o)
		return v, true, err
	}
	_, ok := f.Field(o.Base)
	names := c.t.Func != nil && (o.Base == "func" || o.Base == "probe") // the event's, of a glob's
	if ok || !isBuiltin(o.Base) && !names {
		v, err := c.resolveField(f, entry, o)
		return v, true, err
	}
	return value{}, false, nil
}

func (e *Record) unknown(c *compiler, o Operand) error       { return unknownField(c, e.Format, o) }
func (e *SyscallEntry) unknown(c *compiler, o Operand) error { return unknownField(c, e.Format, o) }

func unknownField(c *compiler, f *tracefs.Format, o Operand) error {
	return c.errAt(o.Pos, "event %s has no field %q (fields: %s; builtins: %s)", f.Name, o.Base, strings.Join(f.FieldNames(), ", "), strings.Join(builtins, ", "))
}

func (e *Record) userSpace() bool       { return e.UserSpace }
func (e *SyscallEntry) userSpace() bool { return true }

func (e *Record) Columns() []Operand       { return fieldColumns(e.Format, e.UserSpace) }
func (e *SyscallEntry) Columns() []Operand { return fieldColumns(e.Format, true) }

func fieldColumns(f *tracefs.Format, userSpace bool) []Operand {
	var cols []Operand
	for _, fl := range f.Fields {
		if fl.DataLoc && userSpace {
			continue // a syscall's copy of user memory: not in a program's context (syscallCopyErr)
		}
		if _, err := fieldVal(fl, f, userSpace); err == nil && !fl.Common {
			cols = append(cols, Operand{Base: fl.Name, Text: fl.Name})
		}
	}
	return cols
}

func (e *Record) HasStringPointer() bool       { return fieldStringPointer(e.Format) }
func (e *SyscallEntry) HasStringPointer() bool { return fieldStringPointer(e.Format) }

func fieldStringPointer(f *tracefs.Format) bool {
	for _, fl := range f.Fields {
		if !fl.Common && fl.IsCharPointer() && (fl.Size == 4 || fl.Size == 8) {
			return true
		}
	}
	return false
}

func (e *Registers) operand(c *compiler, o Operand) (value, bool, error) {
	return argOperand(c, e.Args, false, o)
}

func (e *Slots) operand(c *compiler, o Operand) (value, bool, error) {
	return argOperand(c, e.Args, true, o)
}

// argOperand resolves a name on a function's arguments: the argument's
// value, or a walk from it.
func argOperand(c *compiler, args []Arg, slots bool, o Operand) (value, bool, error) {
	for i, a := range args {
		if a.Name != o.Base {
			continue
		}
		arg := value{name: a.Name, src: srcArg, regOff: a.RegOff}
		if slots {
			if err := slotReadable(a); err != nil {
				return value{}, true, c.errAt(o.Pos, "%v", err)
			}
			arg.typed = kbtf.IsStructPointer(a.Type)
		}
		if len(o.Steps) == 0 {
			v, err := scalar(arg, a.Type, c.ptrSize())
			if err != nil {
				return value{}, true, c.errAt(o.Pos, "%v", err)
			}
			if v.kind == kInt && kbtf.IsCharPointer(a.Type) {
				v = c.stringAt(v, a.Type)
			}
			return v, true, nil
		}
		c.emit(bpf.LoadMem(bpf.R1, asm.RegCtx, a.RegOff, c.regWord()).
			WithSource(bpf.Comment(fmt.Sprintf("r1 = %s (argument %d)", a.Name, i+1))))
		v, err := c.walk(o, a.Type)
		return v, true, err
	}
	return value{}, false, nil
}

func (e *Registers) unknown(c *compiler, o Operand) error { return unknownArg(c, e.Args, o) }
func (e *Slots) unknown(c *compiler, o Operand) error     { return unknownArg(c, e.Args, o) }

func unknownArg(c *compiler, args []Arg, o Operand) error {
	var names []string
	for _, a := range args {
		names = append(names, a.Name)
	}
	call := ""
	if c.call {
		call = "; the call's: ret, duration"
	}
	return c.errAt(o.Pos, "no argument or builtin %q (arguments: %s; builtins: %s%s)", o.Base, strings.Join(names, ", "), strings.Join(builtins, ", "), call)
}

func (e *Registers) userSpace() bool { return e.UserSpace }
func (e *Slots) userSpace() bool     { return false }

func (e *Registers) Columns() []Operand { return argColumns(e.Args, false) }
func (e *Slots) Columns() []Operand     { return argColumns(e.Args, true) }

func argColumns(args []Arg, slots bool) []Operand {
	var cols []Operand
	for _, a := range args {
		if _, err := scalar(value{name: a.Name, src: srcArg}, a.Type, 8); err == nil && (!slots || slotReadable(a) == nil) {
			cols = append(cols, Operand{Base: a.Name, Text: a.Name})
		}
	}
	return cols
}

func (e *Registers) HasStringPointer() bool { return argStringPointer(e.Args) }
func (e *Slots) HasStringPointer() bool     { return argStringPointer(e.Args) }

func argStringPointer(args []Arg) bool {
	for _, a := range args {
		if kbtf.IsCharPointer(a.Type) {
			return true
		}
	}
	return false
}

// operand resolves arg0..argN of a USDT probe.
func (e *USDT) operand(c *compiler, o Operand) (value, bool, error) {
	var i int
	if n, err := fmt.Sscanf(o.Base, "arg%d", &i); n != 1 || err != nil || o.Base != fmt.Sprintf("arg%d", i) {
		return value{}, false, nil
	}
	if i >= len(e.Args) {
		return value{}, true, c.errAt(o.Pos, "%s: this probe has %d argument(s), arg0..arg%d", o.Base, len(e.Args), len(e.Args)-1)
	}
	if len(o.Steps) > 0 || o.Cast != "" {
		return value{}, true, c.errAt(o.Pos, "%s is a number: it has no members (no BTF describes user space)", o.Base)
	}
	a := e.Args[i]
	return value{name: o.Base, kind: kInt, size: a.Size, signed: a.Signed, src: srcUSDT, usdt: &a}, true, nil
}

func (e *USDT) unknown(c *compiler, o Operand) error {
	return c.errAt(o.Pos, "no argument or builtin %q (a USDT probe has arg0..arg%d; builtins: %s)", o.Base, len(e.Args)-1, strings.Join(builtins, ", "))
}

func (e *USDT) userSpace() bool { return true }

func (e *USDT) Columns() []Operand {
	var cols []Operand
	for i := range e.Args {
		name := fmt.Sprintf("arg%d", i)
		cols = append(cols, Operand{Base: name, Text: name})
	}
	return cols
}

func (e *USDT) HasStringPointer() bool { return false }
