package kbtf

import (
	"fmt"
	"strings"

	"github.com/cilium/ebpf/btf"
)

// MemberOffset is the byte offset of a member of a kernel struct, from the
// running kernel's BTF, looking through anonymous structs and unions
// (sk_buff's protocol sits in one from 5.17 on).
func MemberOffset(structName, member string) (int, error) {
	return MemberPathOffset(structName, member)
}

// MemberPathOffset is MemberOffset through nested members: the byte
// offset of a path ("thread.fsbase") in a kernel struct.
func MemberPathOffset(structName, path string) (int, error) {
	spec, err := Kernel()
	if err != nil {
		return 0, err
	}
	var st *btf.Struct
	if err := spec.TypeByName(structName, &st); err != nil {
		return 0, fmt.Errorf("kernel BTF: struct %s: %w", structName, err)
	}
	var t btf.Type = st
	total := 0
	for _, name := range strings.Split(path, ".") {
		off, m, ok := Member(t, name)
		if !ok {
			return 0, fmt.Errorf("kernel BTF: struct %s has no member %s", structName, path)
		}
		total += off
		t = m.Type
	}
	return total, nil
}

// Members are the members of t when it is a struct or a union (through
// typedefs and qualifiers); ok is false for any other type.
func Members(t btf.Type) (members []btf.Member, ok bool) {
	switch u := btf.UnderlyingType(t).(type) {
	case *btf.Struct:
		return u.Members, true
	case *btf.Union:
		return u.Members, true
	}
	return nil, false
}

// Member finds the member of a struct or union t called name, looking
// through anonymous structs and unions, and returns it with its byte
// offset from the start of t.
func Member(t btf.Type, name string) (off int, m btf.Member, ok bool) {
	members, _ := Members(t)
	for _, m := range members {
		if m.Name == name {
			return int(m.Offset.Bytes()), m, true
		}
		if m.Name == "" {
			if inner, im, ok := Member(m.Type, name); ok {
				return int(m.Offset.Bytes()) + inner, im, true
			}
		}
	}
	return 0, btf.Member{}, false
}

// TracepointArg is the index, among the arguments a raw or BTF tracepoint
// program gets, of the tracepoint's pointer to struct structName, from the
// kernel's BTF (btf_trace_EVENT: the proto's first parameter is the
// tracepoint's own data, not passed on): block_rq_issue's request is
// args[1] on 5.10 (the queue comes first), args[0] from 5.11.
func TracepointArg(event, structName string) (int, error) {
	spec, err := Kernel()
	if err != nil {
		return 0, err
	}
	var td *btf.Typedef
	if err := spec.TypeByName("btf_trace_"+event, &td); err != nil {
		return 0, fmt.Errorf("kernel BTF: tracepoint %s: %w", event, err)
	}
	ptr, ok := btf.UnderlyingType(td.Type).(*btf.Pointer)
	if !ok {
		return 0, fmt.Errorf("kernel BTF: btf_trace_%s is no function pointer", event)
	}
	proto, ok := ptr.Target.(*btf.FuncProto)
	if !ok || len(proto.Params) == 0 {
		return 0, fmt.Errorf("kernel BTF: btf_trace_%s is no function pointer", event)
	}
	for i, p := range proto.Params[1:] {
		if pp, ok := btf.UnderlyingType(p.Type).(*btf.Pointer); ok {
			if st, ok := btf.UnderlyingType(pp.Target).(*btf.Struct); ok && st.Name == structName {
				return i, nil
			}
		}
	}
	return 0, fmt.Errorf("kernel BTF: tracepoint %s has no struct %s * argument", event, structName)
}

// HaveMember reports whether a kernel struct has a member (through
// anonymous ones).
func HaveMember(structName, member string) bool {
	_, err := MemberOffset(structName, member)
	return err == nil
}
