package kbtf

import "github.com/cilium/ebpf/btf"

// Enumerator is the value of the enumerator called name in any of the
// BTF's enums (TASK_RUNNING is a macro, SKB_DROP_REASON_NOT_SPECIFIED an
// enumerator): its value, whether it is signed, and whether one was
// found. Two enums naming the same enumerator with different values
// make it ambiguous: not found. One pass over the enums, reading names
// in place.
func (s *Spec) Enumerator(name string) (value int64, found bool) {
	if name == "" {
		return 0, false
	}
	seen := false
	for i, kind := range s.kinds {
		if kind != KindEnum && kind != KindEnum64 {
			continue
		}
		_, _, vlen, kflag, _, rest := s.header(btf.TypeID(i + 1))
		size := 8
		if kind == KindEnum64 {
			size = 12
		}
		for j := 0; j < vlen && (j+1)*size <= len(rest); j++ {
			e := rest[j*size:]
			n := uint64(s.u32(e))
			if n >= uint64(len(s.strings)) || s.strings[n] != name[0] {
				continue
			}
			if b := s.strings[n:]; len(b) <= len(name) || b[len(name)] != 0 || string(b[:len(name)]) != name {
				continue
			}
			var v int64
			switch {
			case kind == KindEnum64:
				v = int64(uint64(s.u32(e[4:])) | uint64(s.u32(e[8:]))<<32)
			case kflag: // signed
				v = int64(int32(s.u32(e[4:])))
			default:
				v = int64(s.u32(e[4:]))
			}
			if seen && v != value {
				return 0, false
			}
			value, seen = v, true
		}
	}
	return value, seen
}
