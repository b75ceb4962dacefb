// Package kbtf reads the running kernel's BTF lazily. cilium/ebpf's parser
// decodes every type header and sorts a name index over all of them before
// the first lookup: 30 ms of a tool's start, for the two or three types a
// run asks for. Here one pass records where each type starts, a name is
// found by its offset in the (deduplicated) string table, and a type is
// decoded into cilium/ebpf's btf types only when asked for. Pointers to
// structs and unions stay stubs (name and size, no members) until Complete
// fills them: walking sk_buff must not decode the whole kernel.
package kbtf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync"

	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"
)

// ErrNotFound is returned when no type has the name asked for.
var ErrNotFound = errors.New("not found")

// Kind is a BTF type kind (include/uapi/linux/btf.h).
type Kind uint8

const (
	KindInt       Kind = 1
	KindPtr       Kind = 2
	KindArray     Kind = 3
	KindStruct    Kind = 4
	KindUnion     Kind = 5
	KindEnum      Kind = 6
	KindFwd       Kind = 7
	KindTypedef   Kind = 8
	KindVolatile  Kind = 9
	KindConst     Kind = 10
	KindRestrict  Kind = 11
	KindFunc      Kind = 12
	KindFuncProto Kind = 13
	KindVar       Kind = 14
	KindDatasec   Kind = 15
	KindFloat     Kind = 16
	KindDeclTag   Kind = 17
	KindTypeTag   Kind = 18
	KindEnum64    Kind = 19
)

// Spec is one BTF blob: its types, decoded on demand.
type Spec struct {
	types   []byte   // the type section
	strings []byte   // the string section
	offsets []uint32 // offsets[id-1]: where type id starts in types
	kinds   []Kind   // kinds[id-1]: a lookup by name skips other kinds without reading their headers
	be      bool     // big-endian: BTF is in the byte order of the kernel that wrote it

	mu      sync.Mutex
	decoded map[btf.TypeID]btf.Type
	stubs   map[btf.Type]btf.TypeID // structs and unions without their members yet
	busy    map[btf.TypeID]bool     // being decoded: a way back to one is a cycle
	found   map[any][]btf.TypeID    // ID's answers
}

// KernelPath is where the running kernel publishes its BTF.
const KernelPath = "/sys/kernel/btf/vmlinux"

var kernel = sync.OnceValues(loadKernel)

// ErrNoKernelBTF is a kernel that publishes no BTF: built without
// CONFIG_DEBUG_INFO_BTF (32-bit ARM's Debian kernel, 5.2 and older ones).
var ErrNoKernelBTF = errors.New("this kernel has no BTF (" + KernelPath + " is missing: it is built without CONFIG_DEBUG_INFO_BTF)")

func loadKernel() (*Spec, error) {
	raw, err := readKernel()
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNoKernelBTF
	}
	if err != nil {
		return nil, fmt.Errorf("read kernel BTF: %w", err)
	}
	s, err := Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", KernelPath, err)
	}
	return s, nil
}

// readKernel maps the kernel's BTF read-only (6.16+), which copies
// nothing; older kernels' sysfs file is read, a page per read(2).
func readKernel() ([]byte, error) {
	f, err := os.Open(KernelPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if n := st.Size(); n > 0 && n < 1<<30 {
		size := (int(n) + os.Getpagesize() - 1) &^ (os.Getpagesize() - 1)
		if b, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ, unix.MAP_PRIVATE|unix.MAP_POPULATE); err == nil {
			return b[:n], nil // mapped for the rest of the run
		}
	}
	return io.ReadAll(f)
}

// Kernel is the running kernel's BTF, read once per run.
func Kernel() (*Spec, error) { return kernel() }

const headerLen = 24

// Parse checks raw's header and records where each type starts. Nothing in
// raw can make it, or a later lookup, panic: sizes are checked against the
// sections before any read.
func Parse(raw []byte) (*Spec, error) {
	if len(raw) < headerLen {
		return nil, errors.New("BTF shorter than its header")
	}
	var bo binary.ByteOrder
	switch {
	case binary.LittleEndian.Uint16(raw) == 0xeb9f:
		bo = binary.LittleEndian
	case binary.BigEndian.Uint16(raw) == 0xeb9f:
		bo = binary.BigEndian
	default:
		return nil, errors.New("no BTF magic")
	}
	be := bo == binary.BigEndian
	if raw[2] != 1 {
		return nil, fmt.Errorf("BTF version %d, want 1", raw[2])
	}
	hdrLen := uint64(bo.Uint32(raw[4:]))
	typeOff, typeLen := uint64(bo.Uint32(raw[8:])), uint64(bo.Uint32(raw[12:]))
	strOff, strLen := uint64(bo.Uint32(raw[16:])), uint64(bo.Uint32(raw[20:]))
	if hdrLen < headerLen || hdrLen > uint64(len(raw)) {
		return nil, fmt.Errorf("BTF header length %d out of range", hdrLen)
	}
	body := raw[hdrLen:]
	if typeOff+typeLen > uint64(len(body)) || strOff+strLen > uint64(len(body)) {
		return nil, errors.New("BTF sections run past the end")
	}
	s := &Spec{
		types:   body[typeOff : typeOff+typeLen],
		strings: body[strOff : strOff+strLen],
		be:      be,
		decoded: map[btf.TypeID]btf.Type{},
		stubs:   map[btf.Type]btf.TypeID{},
		busy:    map[btf.TypeID]bool{},
		found:   map[any][]btf.TypeID{},
	}
	if len(s.strings) > 0 && (s.strings[0] != 0 || s.strings[len(s.strings)-1] != 0) {
		return nil, errors.New("BTF string table is not NUL-delimited")
	}
	s.offsets = make([]uint32, 0, len(s.types)/16)
	s.kinds = make([]Kind, 0, len(s.types)/16)
	for off := 0; off < len(s.types); {
		if len(s.types)-off < 12 {
			return nil, fmt.Errorf("type %d: truncated header", len(s.offsets)+1)
		}
		info := s.u32(s.types[off+4:])
		k := Kind(info >> 24 & 0x1f)
		n := extra(k, int(info&0xffff))
		if n < 0 {
			return nil, fmt.Errorf("type %d: unknown kind %d", len(s.offsets)+1, info>>24&0x1f)
		}
		if len(s.types)-off-12 < n {
			return nil, fmt.Errorf("type %d: truncated", len(s.offsets)+1)
		}
		s.offsets = append(s.offsets, uint32(off))
		s.kinds = append(s.kinds, k)
		off += 12 + n
	}
	return s, nil
}

func (s *Spec) u32(b []byte) uint32 {
	if s.be {
		return binary.BigEndian.Uint32(b)
	}
	return binary.LittleEndian.Uint32(b)
}

// extra is how many bytes follow a type's 12-byte header; -1 for a kind
// this reader does not know. Tables, not a switch: the parse runs it for
// every type, in no predictable order of kinds.
func extra(k Kind, vlen int) int {
	return int(fixed[k&0x1f]) + int(perVlen[k&0x1f])*vlen
}

var fixed = [32]int8{
	0: -1, KindInt: 4, KindVar: 4, KindDeclTag: 4, KindArray: 12,
	20: -1, 21: -1, 22: -1, 23: -1, 24: -1, 25: -1, 26: -1, 27: -1, 28: -1, 29: -1, 30: -1, 31: -1,
}

var perVlen = [32]int8{
	KindStruct: 12, KindUnion: 12, KindDatasec: 12, KindEnum64: 12,
	KindEnum: 8, KindFuncProto: 8,
}

// Len is the number of types, void not counted.
func (s *Spec) Len() int { return len(s.offsets) }

// header is type id's header: name offset, info word, size or type.
func (s *Spec) header(id btf.TypeID) (name uint32, kind Kind, vlen int, kflag bool, sizeType uint32, rest []byte) {
	off := s.offsets[id-1]
	h := s.types[off:]
	info := s.u32(h[4:])
	kind, vlen = Kind(info>>24&0x1f), int(info&0xffff)
	return s.u32(h), kind, vlen, info>>31 == 1, s.u32(h[8:]), h[12 : 12+extra(kind, vlen)]
}

// str is the string at off in the string table ("" when off is outside).
func (s *Spec) str(off uint32) string {
	if uint64(off) >= uint64(len(s.strings)) {
		return ""
	}
	b := s.strings[off:]
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// Find returns the ids of the types of kind k named name, in id order.
func (s *Spec) Find(name string, k Kind) []btf.TypeID {
	if name == "" {
		return nil
	}
	var ids []btf.TypeID
	for i, kind := range s.kinds {
		if kind != k {
			continue
		}
		if n := uint64(s.u32(s.types[s.offsets[i]:])); n < uint64(len(s.strings)) && s.strings[n] == name[0] {
			if b := s.strings[n:]; len(b) > len(name) && b[len(name)] == 0 && string(b[:len(name)]) == name {
				ids = append(ids, btf.TypeID(i+1))
			}
		}
	}
	return ids
}

// ID is the id of the one type of kind k named name. Answers are kept: a
// tool asks for the same struct for each member it needs.
func (s *Spec) ID(name string, k Kind) (btf.TypeID, error) {
	type key struct {
		name string
		k    Kind
	}
	s.mu.Lock()
	ids, ok := s.found[key{name, k}]
	if !ok {
		ids = s.Find(name, k)
		s.found[key{name, k}] = ids
	}
	s.mu.Unlock()
	switch len(ids) {
	case 0:
		return 0, fmt.Errorf("type %s: %w", name, ErrNotFound)
	case 1:
		return ids[0], nil
	}
	return 0, fmt.Errorf("type %s: %d types of that name", name, len(ids))
}

// TypeByName sets *typ to the one type named name whose kind matches typ's:
// a **btf.Struct, **btf.Union, **btf.Typedef, **btf.Func, **btf.Enum or
// **btf.Int, as btf.Spec.TypeByName takes. Structs and unions come with
// their members.
func (s *Spec) TypeByName(name string, typ any) error {
	var k Kind
	switch typ.(type) {
	case **btf.Struct:
		k = KindStruct
	case **btf.Union:
		k = KindUnion
	case **btf.Typedef:
		k = KindTypedef
	case **btf.Func:
		k = KindFunc
	case **btf.Enum:
		k = KindEnum
	case **btf.Int:
		k = KindInt
	default:
		return fmt.Errorf("kbtf: cannot look up a %T", typ)
	}
	id, err := s.ID(name, k)
	if err != nil {
		return err
	}
	t, err := s.TypeByID(id)
	if err != nil {
		return err
	}
	switch p := typ.(type) {
	case **btf.Struct:
		*p = t.(*btf.Struct)
	case **btf.Union:
		*p = t.(*btf.Union)
	case **btf.Typedef:
		*p = t.(*btf.Typedef)
	case **btf.Func:
		*p = t.(*btf.Func)
	case **btf.Enum:
		*p = t.(*btf.Enum)
	case **btf.Int:
		*p = t.(*btf.Int)
	}
	return nil
}

// TypeByID decodes type id; a struct or union comes with its members.
func (s *Spec) TypeByID(id btf.TypeID) (btf.Type, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.decode(id, true, 0)
}

// Complete fills the members of t when it is a stub (a struct or union
// reached through a pointer) and returns t.
func (s *Spec) Complete(t btf.Type) (btf.Type, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return t, s.fill(t, 0)
}

// fill decodes the members of the stub t leads to, through typedefs,
// qualifiers and arrays.
func (s *Spec) fill(t btf.Type, depth int) error {
	for i := 0; i < maxDepth; i++ {
		switch u := t.(type) {
		case *btf.Typedef:
			t = u.Type
		case *btf.Const:
			t = u.Type
		case *btf.Volatile:
			t = u.Type
		case *btf.Restrict:
			t = u.Type
		case *btf.TypeTag:
			t = u.Type
		case *btf.Array:
			t = u.Type
		case *btf.Struct, *btf.Union:
			if id, ok := s.stubs[t]; ok {
				_, err := s.decode(id, true, depth+1)
				return err
			}
			return nil
		default:
			return nil
		}
	}
	return fmt.Errorf("%v: nested more than %d deep", t, maxDepth)
}

// maxDepth bounds decoding: a chain of types this long is a malformed (or
// cyclic) blob, not a kernel.
const maxDepth = 64

// decode turns type id into a btf.Type. full: a struct or union gets its
// members; otherwise it is a stub that Complete fills later. Members that
// are structs, unions or arrays of them are part of the layout and decoded
// in full; what pointers point to is not.
func (s *Spec) decode(id btf.TypeID, full bool, depth int) (btf.Type, error) {
	if id == 0 {
		return (*btf.Void)(nil), nil
	}
	if uint64(id) > uint64(len(s.offsets)) {
		return nil, fmt.Errorf("type id %d out of range (%d types)", id, len(s.offsets))
	}
	if depth > maxDepth {
		return nil, fmt.Errorf("type %d: nested more than %d deep", id, maxDepth)
	}
	if s.busy[id] {
		// Only a pointer may lead back to a type being decoded, and only
		// to a struct or union, which it does not need complete.
		if _, k, _, _, _, _ := s.header(id); (k == KindStruct || k == KindUnion) && !full {
			return s.decoded[id], nil
		}
		return nil, fmt.Errorf("type %d: contains itself", id)
	}
	if t, seen := s.decoded[id]; seen {
		if _, stub := s.stubs[t]; !stub || !full {
			if full {
				return t, s.fill(t, depth)
			}
			return t, nil
		}
		// A stub wanted whole: its members are decoded below, in place.
	}
	s.busy[id] = true
	defer delete(s.busy, id)
	var t btf.Type
	nameOff, kind, vlen, kflag, st, rest := s.header(id)
	name := s.str(nameOff)
	sub := func(id uint32, full bool) (btf.Type, error) { return s.decode(btf.TypeID(id), full, depth+1) }
	var err error
	switch kind {
	case KindInt:
		enc := s.u32(rest)
		t = &btf.Int{Name: name, Size: st, Encoding: btf.IntEncoding(enc >> 24 & 0xf)}
	case KindPtr:
		p := &btf.Pointer{}
		s.decoded[id] = p
		p.Target, err = sub(st, false)
		t = p
	case KindArray:
		a := &btf.Array{Nelems: s.u32(rest[8:])}
		s.decoded[id] = a
		if a.Type, err = sub(s.u32(rest), full); err == nil {
			a.Index, err = sub(s.u32(rest[4:]), false)
		}
		t = a
	case KindStruct, KindUnion:
		if stub, ok := s.decoded[id]; ok {
			t = stub // fill it in place
		} else if kind == KindStruct {
			t = &btf.Struct{Name: name, Size: st}
		} else {
			t = &btf.Union{Name: name, Size: st}
		}
		s.decoded[id] = t
		if !full {
			s.stubs[t] = id
			return t, nil
		}
		delete(s.stubs, t)
		members := make([]btf.Member, vlen)
		for i := range members {
			m := rest[12*i:]
			off := s.u32(m[8:])
			members[i] = btf.Member{Name: s.str(s.u32(m)), Offset: btf.Bits(off)}
			if kflag {
				members[i].Offset, members[i].BitfieldSize = btf.Bits(off&0xffffff), btf.Bits(off>>24)
			}
			if members[i].Type, err = sub(s.u32(m[4:]), true); err != nil {
				break
			}
		}
		if kind == KindStruct {
			t.(*btf.Struct).Members = members
		} else {
			t.(*btf.Union).Members = members
		}
	case KindEnum, KindEnum64:
		e := &btf.Enum{Name: name, Size: st, Signed: kflag, Values: make([]btf.EnumValue, vlen)}
		for i := range e.Values {
			if kind == KindEnum {
				v := rest[8*i:]
				val := uint64(s.u32(v[4:]))
				if kflag {
					val = uint64(int64(int32(val)))
				}
				e.Values[i] = btf.EnumValue{Name: s.str(s.u32(v)), Value: val}
			} else {
				v := rest[12*i:]
				e.Values[i] = btf.EnumValue{Name: s.str(s.u32(v)), Value: uint64(s.u32(v[8:]))<<32 | uint64(s.u32(v[4:]))}
			}
		}
		t = e
	case KindFwd:
		f := &btf.Fwd{Name: name, Kind: btf.FwdStruct}
		if kflag {
			f.Kind = btf.FwdUnion
		}
		t = f
	case KindTypedef:
		td := &btf.Typedef{Name: name}
		s.decoded[id] = td
		td.Type, err = sub(st, full)
		t = td
	case KindVolatile:
		q := &btf.Volatile{}
		s.decoded[id] = q
		q.Type, err = sub(st, full)
		t = q
	case KindConst:
		q := &btf.Const{}
		s.decoded[id] = q
		q.Type, err = sub(st, full)
		t = q
	case KindRestrict:
		q := &btf.Restrict{}
		s.decoded[id] = q
		q.Type, err = sub(st, full)
		t = q
	case KindTypeTag:
		q := &btf.TypeTag{Value: name}
		s.decoded[id] = q
		q.Type, err = sub(st, full)
		t = q
	case KindFunc:
		f := &btf.Func{Name: name, Linkage: btf.FuncLinkage(vlen)}
		s.decoded[id] = f
		f.Type, err = sub(st, false)
		t = f
	case KindFuncProto:
		fp := &btf.FuncProto{Params: make([]btf.FuncParam, vlen)}
		s.decoded[id] = fp
		if fp.Return, err = sub(st, false); err != nil {
			break
		}
		for i := range fp.Params {
			p := rest[8*i:]
			fp.Params[i].Name = s.str(s.u32(p))
			if fp.Params[i].Type, err = sub(s.u32(p[4:]), false); err != nil {
				break
			}
		}
		t = fp
	case KindVar:
		v := &btf.Var{Name: name, Linkage: btf.VarLinkage(s.u32(rest))}
		s.decoded[id] = v
		v.Type, err = sub(st, false)
		t = v
	case KindDatasec:
		ds := &btf.Datasec{Name: name, Size: st, Vars: make([]btf.VarSecinfo, vlen)}
		s.decoded[id] = ds
		for i := range ds.Vars {
			v := rest[12*i:]
			ds.Vars[i].Offset, ds.Vars[i].Size = s.u32(v[4:]), s.u32(v[8:])
			if ds.Vars[i].Type, err = sub(s.u32(v), false); err != nil {
				break
			}
		}
		t = ds
	case KindFloat:
		t = &btf.Float{Name: name, Size: st}
	default:
		// A decl tag annotates another type; nothing refers to one.
		err = fmt.Errorf("type %d: kind %d is not a type", id, kind)
	}
	if err != nil {
		delete(s.decoded, id)
		return nil, err
	}
	s.decoded[id] = t
	return t, nil
}
