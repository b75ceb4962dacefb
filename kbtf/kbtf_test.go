package kbtf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cilium/ebpf/btf"

	"github.com/tracekit/tracekit/internal/privtest"
)

// render prints t as a tree, pointers followed depth levels deep, so two
// decoders' views of a type can be compared as text. complete fills a
// stub (identity for cilium/ebpf's types, which have no stubs).
func render(t btf.Type, depth int, complete func(btf.Type) btf.Type) string {
	var b strings.Builder
	var walk func(t btf.Type, depth int, indent string)
	walk = func(t btf.Type, depth int, indent string) {
		switch u := t.(type) {
		case *btf.Void:
			fmt.Fprintf(&b, "void\n")
		case *btf.Int:
			fmt.Fprintf(&b, "int %s size %d enc %d\n", u.Name, u.Size, u.Encoding)
		case *btf.Float:
			fmt.Fprintf(&b, "float %s size %d\n", u.Name, u.Size)
		case *btf.Pointer:
			if depth == 0 {
				fmt.Fprintf(&b, "pointer to %s\n", u.Target.TypeName())
				return
			}
			fmt.Fprintf(&b, "pointer to ")
			walk(complete(u.Target), depth-1, indent)
		case *btf.Array:
			fmt.Fprintf(&b, "array %d of ", u.Nelems)
			walk(u.Type, depth, indent)
		case *btf.Struct, *btf.Union:
			var members []btf.Member
			if s, ok := u.(*btf.Struct); ok {
				fmt.Fprintf(&b, "struct %s size %d\n", s.Name, s.Size)
				members = s.Members
			} else {
				s := u.(*btf.Union)
				fmt.Fprintf(&b, "union %s size %d\n", s.Name, s.Size)
				members = s.Members
			}
			for _, m := range members {
				fmt.Fprintf(&b, "%s  %s @%d:%d ", indent, m.Name, m.Offset, m.BitfieldSize)
				walk(m.Type, depth, indent+"  ")
			}
		case *btf.Enum:
			fmt.Fprintf(&b, "enum %s size %d signed %v %v\n", u.Name, u.Size, u.Signed, u.Values)
		case *btf.Fwd:
			fmt.Fprintf(&b, "fwd %s %v\n", u.Name, u.Kind)
		case *btf.Typedef:
			fmt.Fprintf(&b, "typedef %s = ", u.Name)
			walk(u.Type, depth, indent)
		case *btf.Const:
			fmt.Fprintf(&b, "const ")
			walk(u.Type, depth, indent)
		case *btf.Volatile:
			fmt.Fprintf(&b, "volatile ")
			walk(u.Type, depth, indent)
		case *btf.Restrict:
			fmt.Fprintf(&b, "restrict ")
			walk(u.Type, depth, indent)
		case *btf.TypeTag:
			fmt.Fprintf(&b, "tag %s ", u.Value)
			walk(u.Type, depth, indent)
		case *btf.Func:
			fmt.Fprintf(&b, "func %s linkage %d ", u.Name, u.Linkage)
			walk(u.Type, depth, indent)
		case *btf.FuncProto:
			fmt.Fprintf(&b, "proto returns ")
			walk(u.Return, depth, indent)
			for _, p := range u.Params {
				fmt.Fprintf(&b, "%s  param %s ", indent, p.Name)
				walk(p.Type, depth, indent+"  ")
			}
		default:
			fmt.Fprintf(&b, "%T\n", t)
		}
	}
	walk(t, depth, "")
	return b.String()
}

func ours(s *Spec) func(btf.Type) btf.Type {
	return func(t btf.Type) btf.Type {
		c, err := s.Complete(t)
		if err != nil {
			panic(err)
		}
		return c
	}
}

func same(t btf.Type) btf.Type { return t }

// TestKernelMatchesCilium decodes types of the running kernel's BTF both
// ways and compares them two pointers deep.
func TestKernelMatchesCilium(t *testing.T) {
	privtest.NeedBTF(t)
	theirs, err := btf.LoadKernelSpec()
	if err != nil {
		t.Fatal(err)
	}
	s, err := Kernel()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		typ  func() any
	}{
		{"sk_buff", func() any { return new(*btf.Struct) }},
		{"task_struct", func() any { return new(*btf.Struct) }},
		{"request", func() any { return new(*btf.Struct) }},
		{"file", func() any { return new(*btf.Struct) }},
		{"btf_trace_kfree_skb", func() any { return new(*btf.Typedef) }},
		{"vfs_write", func() any { return new(*btf.Func) }},
		{"pid_t", func() any { return new(*btf.Typedef) }},
	} {
		want, got := c.typ(), c.typ()
		if err := theirs.TypeByName(c.name, want); err != nil {
			t.Fatalf("cilium/ebpf: %s: %v", c.name, err)
		}
		if err := s.TypeByName(c.name, got); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		w, g := render(deref(want), 2, same), render(deref(got), 2, ours(s))
		if w != g {
			t.Errorf("%s differs from cilium/ebpf's decoding:\n%s", c.name, diff(w, g))
		}
	}
}

func deref(p any) btf.Type {
	switch p := p.(type) {
	case **btf.Struct:
		return *p
	case **btf.Typedef:
		return *p
	case **btf.Func:
		return *p
	}
	panic(fmt.Sprintf("%T", p))
}

// diff shows the first line where two renderings part.
func diff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(w) && i < len(g); i++ {
		if w[i] != g[i] {
			return fmt.Sprintf("line %d:\nwant %s\ngot  %s", i+1, w[i], g[i])
		}
	}
	return fmt.Sprintf("want %d lines, got %d", len(w), len(g))
}

// sample is a blob cilium/ebpf marshals, with what the kernel's BTF has:
// bitfields, a signed 64-bit enum, a union forward, type tags, a list that
// points at itself, a function.
func sample(t testing.TB, order binary.ByteOrder) []byte {
	u32 := &btf.Int{Name: "u32", Size: 4}
	s64 := &btf.Int{Name: "long", Size: 8, Encoding: btf.Signed}
	char := &btf.Int{Name: "char", Size: 1, Encoding: btf.Char}
	node := &btf.Struct{Name: "node", Size: 32}
	node.Members = []btf.Member{
		{Name: "next", Type: &btf.Pointer{Target: node}},
		{Name: "flags", Type: u32, Offset: 64, BitfieldSize: 3},
		{Name: "mode", Type: u32, Offset: 67, BitfieldSize: 5},
		{Name: "", Type: &btf.Union{Name: "", Size: 8, Members: []btf.Member{
			{Name: "a", Type: s64},
			{Name: "b", Type: &btf.Array{Index: u32, Type: char, Nelems: 8}},
		}}, Offset: 128},
		{Name: "user", Type: &btf.Pointer{Target: &btf.TypeTag{Value: "user", Type: &btf.Const{Type: char}}}, Offset: 192},
	}
	kind := &btf.Enum{Name: "kind", Size: 8, Signed: true, Values: []btf.EnumValue{{Name: "NEG", Value: ^uint64(0)}, {Name: "BIG", Value: 1 << 40}}}
	fn := &btf.Func{Name: "visit", Linkage: btf.GlobalFunc, Type: &btf.FuncProto{Return: s64, Params: []btf.FuncParam{
		{Name: "n", Type: &btf.Pointer{Target: &btf.Typedef{Name: "node_t", Type: node}}},
		{Name: "k", Type: kind},
		{Name: "u", Type: &btf.Pointer{Target: &btf.Fwd{Name: "opaque", Kind: btf.FwdUnion}}},
	}}}
	b, err := btf.NewBuilder([]btf.Type{node, fn, &btf.Volatile{Type: &btf.Restrict{Type: &btf.Pointer{Target: (*btf.Void)(nil)}}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := b.Marshal(nil, &btf.MarshalOptions{Order: order})
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func TestSampleMatchesCilium(t *testing.T) {
	for _, order := range []binary.ByteOrder{binary.LittleEndian, binary.BigEndian} {
		raw := sample(t, order)
		theirs, err := btf.LoadSpecFromReader(bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		s, err := Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"node", "visit"} {
			var want, got btf.Type
			if name == "visit" {
				var a, b *btf.Func
				if err := theirs.TypeByName(name, &a); err != nil {
					t.Fatal(err)
				}
				if err := s.TypeByName(name, &b); err != nil {
					t.Fatal(err)
				}
				want, got = a, b
			} else {
				var a, b *btf.Struct
				if err := theirs.TypeByName(name, &a); err != nil {
					t.Fatal(err)
				}
				if err := s.TypeByName(name, &b); err != nil {
					t.Fatal(err)
				}
				want, got = a, b
			}
			w, g := render(want, 3, same), render(got, 3, ours(s))
			if w != g {
				t.Errorf("%v %s differs from cilium/ebpf's decoding:\n%s", order, name, diff(w, g))
			}
		}
		for id := 1; id <= s.Len(); id++ {
			if _, err := s.TypeByID(btf.TypeID(id)); err != nil {
				t.Errorf("%v type %d: %v", order, id, err)
			}
		}
	}
}

// TestStubs: a pointer's struct has no members until Complete, and
// completing it fills the very object the pointer holds.
func TestStubs(t *testing.T) {
	s, err := Parse(sample(t, binary.NativeEndian))
	if err != nil {
		t.Fatal(err)
	}
	var fn *btf.Func
	if err := s.TypeByName("visit", &fn); err != nil {
		t.Fatal(err)
	}
	td := fn.Type.(*btf.FuncProto).Params[0].Type.(*btf.Pointer).Target.(*btf.Typedef)
	st := td.Type.(*btf.Struct)
	if st.Name != "node" || st.Size != 32 || st.Members != nil {
		t.Fatalf("node through a pointer: %+v, want a stub", st)
	}
	if _, err := s.Complete(td); err != nil {
		t.Fatal(err)
	}
	if len(st.Members) != 5 {
		t.Fatalf("completed node has %d members, want 5", len(st.Members))
	}
	var again *btf.Struct
	if err := s.TypeByName("node", &again); err != nil || again != st {
		t.Fatalf("node by name: %p, %v; want the completed %p", again, err, st)
	}
	if err := s.TypeByName("nothing", &again); !errors.Is(err, ErrNotFound) {
		t.Fatalf("an absent name: %v, want ErrNotFound", err)
	}
}

// blob builds raw BTF from type records (12-byte headers and what follows)
// and a string table.
func blob(types [][]uint32, strs string) []byte {
	var tb bytes.Buffer
	for _, r := range types {
		binary.Write(&tb, binary.LittleEndian, r)
	}
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, []uint32{0x0001eb9f, 24, 0, uint32(tb.Len()), uint32(tb.Len()), uint32(len(strs))})
	b.Write(tb.Bytes())
	b.WriteString(strs)
	return b.Bytes()
}

// TestCycles: a blob whose types contain themselves is an error, not a
// hang or a stack overflow.
func TestCycles(t *testing.T) {
	const typedef, ptr, constq, array, strct = 8 << 24, 2 << 24, 10 << 24, 3 << 24, 4 << 24
	for name, types := range map[string][][]uint32{
		"typedef of itself":  {{1, typedef, 1}},
		"pointer to itself":  {{0, ptr, 1}},
		"const of a typedef": {{0, constq, 2}, {1, typedef, 1}},
		"array of itself":    {{0, array, 0, 1, 1, 4}},
		"struct in itself":   {{1, strct | 1, 8, 1, 1, 0}},
		"out of range":       {{1, typedef, 7}},
	} {
		s, err := Parse(blob(types, "\x00t\x00"))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := s.TypeByID(1); err == nil {
			t.Errorf("%s: decoded without an error", name)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add(sample(f, binary.LittleEndian))
	f.Add(sample(f, binary.BigEndian))
	f.Add(blob([][]uint32{{1, 8 << 24, 1}}, "\x00t\x00"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		s, err := Parse(raw)
		if err != nil {
			return
		}
		for id := 1; id <= s.Len() && id < 500; id++ {
			typ, err := s.TypeByID(btf.TypeID(id))
			if err == nil {
				s.Complete(typ)
				render(typ, 2, func(t btf.Type) btf.Type { c, _ := s.Complete(t); return c })
			}
		}
		s.Find("node", KindStruct)
		var st *btf.Struct
		s.TypeByName("t", &st)
	})
}
