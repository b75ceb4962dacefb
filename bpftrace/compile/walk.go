package compile

import (
	"fmt"
	"strings"

	bpf "github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/bpftrace/parse"
	"github.com/tracekit/tracekit/kbtf"
)

// Types is the kernel's BTF as the compiler reads it: casts name its
// structs, and -> walks them.
type Types interface {
	// Named is the struct, union or typedef ("struct sock", "u32") of
	// that name; a struct or union comes with its members.
	Named(name string) (btf.Type, error)
	// Complete gives a struct or union reached through a pointer its
	// members.
	Complete(t btf.Type) (btf.Type, error)
}

// KernelTypes are a kernel's BTF (kbtf.Kernel) as the compiler reads it.
func KernelTypes(spec *kbtf.Spec) Types { return kernelTypes{spec} }

type kernelTypes struct{ spec *kbtf.Spec }

func (k kernelTypes) Named(name string) (btf.Type, error) {
	if n, ok := strings.CutPrefix(name, "struct "); ok {
		var t *btf.Struct
		err := k.spec.TypeByName(strings.TrimSpace(n), &t)
		return t, err
	}
	if n, ok := strings.CutPrefix(name, "union "); ok {
		var t *btf.Union
		err := k.spec.TypeByName(strings.TrimSpace(n), &t)
		return t, err
	}
	var t *btf.Typedef
	err := k.spec.TypeByName(name, &t)
	return t, err
}

func (k kernelTypes) Complete(t btf.Type) (btf.Type, error) { return k.spec.Complete(t) }

// intTypes are the integer types a cast names without BTF: bpftrace's
// and C's, with their size and sign.
var intTypes = map[string]struct {
	size   int
	signed bool
}{
	"uint8": {1, false}, "uint16": {2, false}, "uint32": {4, false}, "uint64": {8, false},
	"int8": {1, true}, "int16": {2, true}, "int32": {4, true}, "int64": {8, true},
	"u8": {1, false}, "u16": {2, false}, "u32": {4, false}, "u64": {8, false},
	"s8": {1, true}, "s16": {2, true}, "s32": {4, true}, "s64": {8, true},
	"char": {1, true}, "unsigned char": {1, false}, "short": {2, true}, "unsigned short": {2, false},
	"int": {4, true}, "unsigned int": {4, false}, "unsigned": {4, false},
	"long": {8, true}, "unsigned long": {8, false}, "long long": {8, true}, "unsigned long long": {8, false},
	"bool": {1, false}, "_Bool": {1, false},
}

// named is the BTF type a cast or a record's field names, with "const"
// and "volatile" left out.
func (c *compiler) named(name string, at parse.Pos) (btf.Type, error) {
	name = strings.TrimSpace(strings.NewReplacer("const ", "", "volatile ", "").Replace(name))
	if c.opt.Types == nil {
		return nil, errAt(c.opt.File, at, "%s: the kernel's types come from its BTF, which this kernel does not publish (/sys/kernel/btf/vmlinux)", name)
	}
	t, err := c.opt.Types.Named(name)
	if err != nil {
		return nil, errAt(c.opt.File, at, "%s: not a type of the kernel's BTF", name)
	}
	return t, nil
}

// castType is what (Type)x makes of x: a pointer to a type of the
// kernel's, or an integer of a size.
func (c *compiler) castType(x *parse.Cast, from typ) (typ, error) {
	if x.Type.Ptr > 1 {
		return typ{size: 8}, nil // a pointer to pointers: an address, read as an integer
	}
	if x.Type.Ptr == 1 {
		// The memory is the one the value pointed into: a uprobe's
		// argument, a syscall's pointer are the process's; curtask, a
		// kprobe's argument the kernel's.
		t := typ{size: 8, user: from.user}
		if it, ok := intTypes[x.Type.Name]; ok {
			t.ptr = &btf.Int{Size: uint32(it.size), Encoding: map[bool]btf.IntEncoding{true: btf.Signed}[it.signed]}
			return t, nil
		}
		if x.Type.Name == "void" {
			return typ{size: 8}, nil
		}
		p, err := c.named(x.Type.Name, x.Pos)
		if err != nil {
			return typ{}, err
		}
		t.ptr = p
		return t, nil
	}
	if from.str {
		return typ{}, errAt(c.opt.File, x.Pos, "a string cast to %s", x.Type.Name)
	}
	it, ok := intTypes[x.Type.Name]
	if !ok {
		return typ{}, errAt(c.opt.File, x.Pos, "(%s) casts to an integer type or to a pointer here", x.Type)
	}
	return typ{size: 8, signed: it.signed, castSize: it.size, width: it.size}, nil
}

// member is the member name of the struct base points at (->) or is
// (.), its byte offset from it, and what reading it gives.
func (c *compiler) member(base typ, x *parse.Field) (int, btf.Type, typ, error) {
	switch {
	case base.str:
		return 0, nil, typ{}, errAt(c.opt.File, x.NamePos, "a string has no member %s", x.Name)
	case base.ptr == nil:
		return 0, nil, typ{}, errAt(c.opt.File, x.NamePos, "%s of an integer: cast it to the struct it points at first, (struct NAME *)", map[bool]string{true: "->", false: "."}[x.Arrow])
	case x.Arrow && base.embedded:
		return 0, nil, typ{}, errAt(c.opt.File, x.NamePos, "->%s of a struct, not of a pointer: use .%s", x.Name, x.Name)
	case !x.Arrow && !base.embedded:
		return 0, nil, typ{}, errAt(c.opt.File, x.NamePos, ".%s of a pointer: use ->%s", x.Name, x.Name)
	}
	st := base.ptr
	if _, ok := kbtf.Members(st); ok && c.opt.Types != nil {
		full, err := c.opt.Types.Complete(btf.UnderlyingType(st))
		if err != nil {
			return 0, nil, typ{}, errAt(c.opt.File, x.NamePos, "%v", err)
		}
		st = full
	}
	members, ok := kbtf.Members(st)
	if !ok {
		return 0, nil, typ{}, errAt(c.opt.File, x.NamePos, "%s is not a struct or a union: it has no member %s", typeName(st), x.Name)
	}
	off, m, ok := kbtf.Member(st, x.Name)
	if !ok {
		var names []string
		for _, m := range members {
			if m.Name != "" && len(names) < 12 {
				names = append(names, m.Name)
			}
		}
		return 0, nil, typ{}, errAt(c.opt.File, x.NamePos, "%s has no member %s (it has %s...)", typeName(st), x.Name, strings.Join(names, ", "))
	}
	if m.BitfieldSize > 0 {
		return 0, nil, typ{}, errAt(c.opt.File, x.NamePos, "%s.%s is a bit field: not taken yet", typeName(st), x.Name)
	}
	t, err := c.valueOf(m.Type, base.user, x.NamePos)
	return off, m.Type, t, err
}

// derefType is what *x reads, of x's type t.
func (c *compiler) derefType(t typ, at parse.Pos) (typ, error) {
	if t.ptr == nil {
		return typ{size: 8, signed: true, read: 8, width: 8, user: t.user}, nil
	}
	if t.embedded {
		return typ{}, errAt(c.opt.File, at, "* of a struct: walk it with . or ->")
	}
	switch btf.UnderlyingType(t.ptr).(type) {
	case *btf.Struct, *btf.Union:
		return typ{}, errAt(c.opt.File, at, "* of a pointer to %s: walk it with ->", typeName(t.ptr))
	}
	return c.valueOf(t.ptr, t.user, at)
}

// valueOf is what reading a value of type t gives: an integer (a
// pointer keeps what it points at), a string of a char array, or an
// embedded struct's address; user (where it is read from) stays with it:
// a pointer read from the process's memory points into it.
func (c *compiler) valueOf(t btf.Type, user bool, at parse.Pos) (typ, error) {
	switch u := btf.UnderlyingType(t).(type) {
	case *btf.Struct, *btf.Union:
		return typ{size: 8, ptr: t, embedded: true, user: user}, nil
	case *btf.Int:
		return typ{size: 8, signed: u.Encoding&btf.Signed != 0, read: int(u.Size), width: int(u.Size), user: user}, nil
	case *btf.Enum:
		return typ{size: 8, signed: u.Signed, read: int(u.Size), width: int(u.Size), user: user}, nil
	case *btf.Pointer:
		return typ{size: 8, ptr: u.Target, user: user, read: c.ptrSize()}, nil
	case *btf.Array:
		if e, ok := btf.UnderlyingType(u.Type).(*btf.Int); ok && e.Size == 1 && u.Nelems > 0 && u.Nelems <= 256 {
			s := strT(int(u.Nelems))
			s.read, s.user, s.bytes = int(u.Nelems), user, int(u.Nelems)
			return s, nil
		}
		return typ{}, errAt(c.opt.File, at, "an array of %s: only char arrays (strings) are read here", typeName(u.Type))
	}
	return typ{}, errAt(c.opt.File, at, "a %s is not read here", typeName(t))
}

func (c *compiler) ptrSize() int {
	if c.opt.Regs != nil && c.opt.Regs.Width == 4 {
		return 4
	}
	return 8
}

// typeName is t as C writes it.
func typeName(t btf.Type) string {
	switch u := t.(type) {
	case *btf.Struct:
		return "struct " + u.Name
	case *btf.Union:
		return "union " + u.Name
	case *btf.Pointer:
		return typeName(u.Target) + " *"
	case nil:
		return "void"
	}
	if n := t.TypeName(); n != "" {
		return n
	}
	return fmt.Sprintf("%T", t)
}

// walk compiles x->name and x.name: R0 the struct's address plus the
// member's offset, then the member read.
func (g *gen) walk(x *parse.Field) (typ, error) {
	base, err := g.expr(x.X)
	if err != nil {
		return typ{}, err
	}
	off, _, t, err := g.c.member(base, x)
	if err != nil {
		return typ{}, err
	}
	if off != 0 {
		g.emit(asm.Note(bpf.Instructions{bpf.Add.Imm(bpf.R0, int32(off))}, fmt.Sprintf("&%s%s%s: +%d", typeName(base.ptr), map[bool]string{true: "->", false: "."}[x.Arrow], x.Name, off))...)
	}
	return g.read(t, x.Pos)
}

// read reads the value t describes at the address in R0: an integer
// into R0, a char array into a buffer; an embedded struct's address
// stays in R0.
func (g *gen) read(t typ, at parse.Pos) (typ, error) {
	if t.embedded {
		return t, nil
	}
	rd := g.c.opt.Readers()
	helper := rd.Kernel
	if t.user {
		helper = rd.User
	}
	if t.str {
		off, err := g.alloc(t.size, at)
		if err != nil {
			return typ{}, err
		}
		g.zero(off, t.size)
		g.emit(bpf.Mov.Reg(bpf.R3, bpf.R0))
		g.stackPtr(bpf.R1, off)
		g.emit(bpf.Mov.Imm(bpf.R2, int32(t.read)), helper.Call())
		t.off = off
		return t, nil
	}
	tmp, err := g.alloc(8, at)
	if err != nil {
		return typ{}, err
	}
	size, ok := asm.MemSize(t.read)
	if !ok {
		return typ{}, errAt(g.file(), at, "a %d-byte value is not read here", t.read)
	}
	g.emit(bpf.Mov.Reg(bpf.R3, bpf.R0))
	g.stackPtr(bpf.R1, tmp)
	g.emit(bpf.Mov.Imm(bpf.R2, int32(t.read)), helper.Call(), bpf.LoadMem(bpf.R0, bpf.RFP, tmp, size))
	if t.signed && t.read < 8 {
		shift := int32(64 - 8*t.read)
		g.emit(bpf.LSh.Imm(bpf.R0, shift), bpf.ArSh.Imm(bpf.R0, shift))
	}
	t.read = 0
	return t, nil
}

// cast compiles (Type)x.
func (g *gen) cast(x *parse.Cast) (typ, error) {
	from, err := g.expr(x.X)
	if err != nil {
		return typ{}, err
	}
	t, err := g.c.castType(x, from)
	if err != nil {
		return typ{}, err
	}
	if t.castSize > 0 && t.castSize < 8 {
		shift := int32(64 - 8*t.castSize)
		g.emit(bpf.LSh.Imm(bpf.R0, shift))
		if t.signed {
			g.emit(bpf.ArSh.Imm(bpf.R0, shift))
		} else {
			g.emit(bpf.RSh.Imm(bpf.R0, shift))
		}
	}
	t.castSize = 0
	return t, nil
}
