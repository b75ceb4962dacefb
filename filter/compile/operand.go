package compile

import (
	"fmt"
	"sort"
	"strings"

	bpf "github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/kbtf"
	"github.com/tracekit/tracekit/tracefs"
	"github.com/tracekit/tracekit/uprobe"
)

type valueKind int

const (
	kInt valueKind = iota
	kString
	kDump   // a structure printed from BTF, through the pointer ptr (dump.go)
	kFrames // kstack in a record: its return addresses (bpf_get_stack)
)

// source is where a value is.
type source int

const (
	srcCtx      source = iota // a tracepoint field at ctxOff
	srcDataLoc                // a __data_loc string of the record
	srcArg                    // a probe's argument, in the register at regOff
	srcWalk                   // at the address resolve left in R1
	srcBuiltin                // from a helper
	srcUSDT                   // a USDT argument, as its spec says
	srcEntry                  // a syscall's argument or number, in the user's pt_regs at regOff (SyscallEntry)
	srcStash                  // a call's entry value, in its stash record at ctxOff (Return)
	srcDuration               // a call's nanoseconds since its entry (Return)
	srcFunc                   // the function of a run over several (Target.Func)
	srcArith                  // arithmetic on operands (evalArith)
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
	typed   bool              // a struct pointer in a trampoline's slot: no bit operations on it (Slots)
	nr      bool              // srcEntry: the syscall's number, a 32-bit register
	btfType btf.Type          // a pointer's type, where BTF gives one
	dumpID  btf.TypeID        // kDump: the structure's type in the kernel's BTF
	arith   *Arith            // srcArith
}

// resolve finds what an operand denotes. For a walked path it emits the
// code that leaves the address in R1; fetch it right after.
func (c *compiler) resolve(o Operand) (value, error) {
	if o.Arith != nil {
		return c.arithType(o)
	}
	if r, ok := c.t.Event.(*Return); ok {
		if v, ok := r.stashed[o.key()]; ok && !o.IsConst() {
			return v, nil // (char *)arg0 too: its string was read at the entry
		}
	}
	if o.Ksym || o.Usym {
		fn, where := "ksym", "kernel"
		if o.Usym {
			fn, where = "usym", "user"
		}
		if c.option == "" {
			return value{}, c.errAt(o.Pos, "%s() names an address in the output (--fields, --count-by): compare the address itself", fn)
		}
		inner := o
		inner.Ksym, inner.Usym = false, false
		v, err := c.resolve(inner)
		if err == nil && (v.kind != kInt || v.size != c.ptrSize()) {
			return value{}, c.errAt(o.Pos, "%s is %s: %s() names a %s address (%d bytes here)", v.name, v.describe(), fn, where, c.ptrSize())
		}
		return v, err
	}
	if o.Dump {
		return c.dump(o)
	}
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
		if v.kind != kInt || v.size != c.ptrSize() {
			return value{}, c.errAt(o.Pos, "%s is %s: only an address (%d bytes here) can be read as a string", v.name, v.describe(), c.ptrSize())
		}
		return c.stringAt(v, nil), nil
	}
	v, ok, err := c.t.Event.operand(c, o)
	if ok || err != nil {
		return v, err
	}
	if (o.Base == "func" || o.Base == "probe") && c.t.Func != nil {
		// probe, bpftrace's name, says the same: the event of a run over
		// several.
		if len(o.Steps) > 0 || o.Cast != "" {
			return value{}, c.errAt(o.Pos, "%s names the event: it has no members", o.Base)
		}
		return value{name: o.Base, kind: kInt, size: 8, src: srcFunc, symbols: c.t.Func.Names}, nil
	}
	if isBuiltin(o.Base) {
		return c.builtin(o)
	}
	return value{}, c.t.Event.unknown(c, o)
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
		return fmt.Errorf("argument %s (%s) cannot be read at a BPF trampoline: use --attach=perf (a kprobe)", a.Name, kbtf.TypeName(a.Type))
	}
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
	if o.Base == "kstack" {
		// The kernel's stack: as a key, an id of the stacks map; in a
		// record, its return addresses.
		switch c.option {
		case "--count-by":
			return value{name: o.Base, kind: kInt, signed: true, size: 8, src: srcBuiltin, builtin: o.Base}, nil
		case "--fields":
			return value{name: o.Base, kind: kFrames, src: srcBuiltin, builtin: o.Base}, nil
		}
		return value{}, c.errAt(o.Pos, "kstack is counted by (--count-by kstack) or printed (--fields kstack): it is not a number")
	}
	if o.Base == "ustack" {
		// Counted by profile's unwinder (filter's run), never compiled here.
		return value{}, c.errAt(o.Pos, "ustack is a stack, counted by (--count-by ustack) or printed (--fields ustack): it is not a number")
	}
	if o.Base == "cpid" && c.t.CPid == 0 {
		return value{}, c.errAt(o.Pos, "cpid is the pid of the command -c runs: add -c CMD")
	}
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
	case c.t.Event.userSpace() || kbtf.HasUserTag(t):
		sp = spaceUser
	case p.src == srcCtx:
		sp = spaceKernel // a tracepoint's own char * points at kernel memory
	}
	p.pointer = true
	return value{name: p.name, kind: kString, ptr: &p, space: sp}
}

// resolveField resolves a name on a tracepoint's fields: from the record,
// or with entry, from the user's registers at the syscall's entry.
func (c *compiler) resolveField(format *tracefs.Format, entry *asm.Regs, o Operand) (value, error) {
	f, ok := format.Field(o.Base)
	if !ok {
		return value{}, unknownField(c, format, o)
	}
	userSpace := c.t.Event.userSpace()
	if f.Common {
		// The kernel refuses tracepoint programs that read the record's
		// first 8 bytes, where the common fields are.
		if f.Name == "common_pid" && len(o.Steps) == 0 && o.Cast == "" {
			return c.builtin(Operand{Pos: o.Pos, Base: "tid"}) // the task's pid: the thread's id
		}
		return value{}, c.errAt(o.Pos, "%s is in the record's first 8 bytes, which a BPF program may not read (common_pid reads as the tid builtin; pid is the process)", f.Name)
	}
	if f.DataLoc && userSpace {
		return value{}, c.errAt(o.Pos, "%v", syscallCopyErr(f))
	}
	if o.Cast != "" {
		if f.Size != c.ptrSize() || f.DataLoc || f.ArrayLen > 0 {
			return value{}, c.errAt(o.Pos, "field %s (%s) is not a pointer: it cannot be cast to struct %s *", f.Name, f.Type, o.Cast)
		}
		if c.t.BTF == nil {
			return value{}, c.errAt(o.Pos, "casts need the kernel's BTF (/sys/kernel/btf/vmlinux)")
		}
		st, err := c.structByName(o.Cast)
		if err != nil {
			return value{}, c.errAt(o.Pos, "%v", err)
		}
		if entry != nil {
			v, err := entryField(format, entry, f)
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
	v, err := fieldVal(f, format, userSpace)
	if err != nil || entry == nil {
		return v, err
	}
	// At the syscall's entry: the same value, from the user's registers.
	in := &v
	if v.ptr != nil {
		in = v.ptr // a string: its address is the register
	}
	e, err := entryField(format, entry, f)
	if err != nil {
		return value{}, c.errAt(o.Pos, "%v", err)
	}
	in.src, in.regOff, in.ctxOff, in.nr = srcEntry, e.regOff, 0, e.nr
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
func entryField(format *tracefs.Format, entry *asm.Regs, f tracefs.Field) (value, error) {
	if f.Name == "__syscall_nr" {
		return value{name: f.Name, regOff: entry.SyscallNr, nr: true}, nil
	}
	i := 0
	for _, g := range format.Fields {
		switch {
		case g.Common || g.Name == "__syscall_nr" || g.DataLoc: // 6.19+ adds __data_loc copies (__buf_val) after the arguments
			continue
		case g.Name == f.Name:
			if i >= len(entry.SyscallArgs) {
				return value{}, fmt.Errorf("%s is a syscall's argument %d: a syscall has %d", f.Name, i+1, len(entry.SyscallArgs))
			}
			return value{name: f.Name, regOff: entry.SyscallArgs[i]}, nil
		}
		i++
	}
	return value{}, fmt.Errorf("%s is not a syscall's argument", f.Name)
}

// emitEntryLoad loads a srcEntry value's register into dst: all of an
// argument's, the low 32 bits of the number (an int in the record; arm64's
// syscallno is an s32, x86-64's orig_ax a long).
func (c *compiler) emitEntryLoad(dst bpf.Register, v value) {
	size, what := c.regWord(), "argument"
	if v.nr {
		size, what = bpf.Word, "number"
	}
	c.emit(
		bpf.LoadMem(dst, asm.RegCtx, 0, c.regWord()).WithSource(bpf.Comment(fmt.Sprintf("%s = %s: the syscall's %s, at pt_regs+%d of the wrapper's argument", dst, v.name, what, v.regOff))),
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
	if f.IsCharPointer() && (f.Size == 4 || f.Size == 8) {
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

// scalar describes v, an argument or walked member, as its type t says; a
// pointer is ptr bytes (the traced kernel's: compiler.ptrSize).
func scalar(v value, t btf.Type, ptr int) (value, error) {
	switch u := btf.UnderlyingType(t).(type) {
	case *btf.Int:
		v.kind, v.signed, v.size = kInt, u.Encoding&btf.Signed != 0, int(u.Size)
		return v, nil
	case *btf.Enum:
		v.kind, v.signed, v.size = kInt, u.Signed, int(u.Size)
		return v, nil
	case *btf.Pointer:
		v.kind, v.size, v.pointer, v.btfType = kInt, ptr, true, t
		return v, nil
	case *btf.Array:
		if i, ok := btf.UnderlyingType(u.Type).(*btf.Int); ok && i.Size == 1 && v.src == srcWalk {
			v.kind, v.strLen = kString, int(u.Nelems)
			return v, nil
		}
	}
	return value{}, fmt.Errorf("%s has type %s, neither a number nor a char array", v.name, kbtf.TypeName(t))
}

func (v value) describe() string {
	switch {
	case v.kind == kString:
		return "a string"
	case v.kind == kFrames:
		return "a stack"
	case v.pointer:
		return "a pointer"
	}
	return fmt.Sprintf("a %d-byte number", v.size)
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
					return value{}, c.errAt(s.Pos-2, "%s is %s, not a pointer: use '.' instead of '->'", name, kbtf.TypeName(t))
				}
				c.read(c.ptrSize(), scratchOff)
				c.emit(bpf.LoadMem(bpf.R1, bpf.RFP, scratchOff, sizeOf(c.ptrSize())))
			}
			p, ok := btf.UnderlyingType(t).(*btf.Pointer)
			if !ok {
				return value{}, c.errAt(s.Pos-2, "%s is %s, not a pointer: '->' cannot walk through it", name, kbtf.TypeName(t))
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
	v, err := scalar(value{name: name, src: srcWalk}, t, c.ptrSize())
	if err != nil {
		return value{}, c.errAt(o.Steps[len(o.Steps)-1].Pos, "%v", err)
	}
	if v.kind == kInt && kbtf.IsCharPointer(t) {
		v = c.stringAt(v, t)
	}
	return v, nil
}

// member finds a struct or union member by name, looking into anonymous
// members, and returns its byte offset and type.
func member(t btf.Type, name string) (int, btf.Type, error) {
	members, ok := kbtf.Members(t)
	if !ok {
		return 0, nil, fmt.Errorf("%s is not a struct: it has no member %q", kbtf.TypeName(t), name)
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
	return 0, nil, fmt.Errorf("%s has no member %q (members: %s)", kbtf.TypeName(t), name, strings.Join(names, ", "))
}
