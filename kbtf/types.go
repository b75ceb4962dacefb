package kbtf

import (
	"fmt"
	"strings"

	"github.com/cilium/ebpf/btf"
)

// IsStructPointer reports a pointer to a struct or union.
func IsStructPointer(t btf.Type) bool {
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

// HasUserTag reports a btf_type_tag("user") on the pointer's target (kernels
// built with clang and pahole 1.23+; Debian's gcc-built BTF has none).
func HasUserTag(t btf.Type) bool {
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

// IsCharPointer reports whether t is a pointer to char (const or not).
func IsCharPointer(t btf.Type) bool {
	p, ok := btf.UnderlyingType(t).(*btf.Pointer)
	if !ok {
		return false
	}
	i, ok := btf.UnderlyingType(p.Target).(*btf.Int)
	return ok && i.Size == 1
}

// TypeName is t as C declares it: "struct sk_buff *", "const char *".
func TypeName(t btf.Type) string {
	switch u := t.(type) {
	case *btf.Pointer:
		return TypeName(u.Target) + " *"
	case *btf.Struct:
		return "struct " + u.Name
	case *btf.Union:
		return "union " + u.Name
	case *btf.Const:
		return "const " + TypeName(u.Type)
	case *btf.Volatile:
		return TypeName(u.Type)
	case *btf.TypeTag:
		return TypeName(u.Type)
	case *btf.Array:
		return fmt.Sprintf("%s[%d]", TypeName(u.Type), u.Nelems)
	case nil:
		return "void"
	}
	if n := t.TypeName(); n != "" {
		return n
	}
	return fmt.Sprintf("%T", t)
}

// Signature prints a function's prototype the C way, as ksnoop info
// does: "int ksys_write(unsigned int fd, const char *buf, size_t count);".
func Signature(fn *btf.Func, proto *btf.FuncProto) string {
	var params []string
	for _, p := range proto.Params {
		params = append(params, cDecl(p.Type, p.Name))
	}
	return fmt.Sprintf("%s(%s);", cDecl(proto.Return, fn.Name), strings.Join(params, ", "))
}

// cDecl declares name of type t, the C way.
func cDecl(t btf.Type, name string) string {
	tn := TypeName(t)
	if strings.HasSuffix(tn, "*") {
		return tn + name
	}
	return tn + " " + name
}
