package compile

import (
	"fmt"

	"github.com/cilium/ebpf"
	bpf "github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/kbtf"
)

// A structure printed whole, as ksnoop prints one: --fields '*skb' has the
// kernel write the structure skb points to as text, from its own BTF
// (bpf_snprintf_btf, 5.10+), one line: (struct sk_buff){.len = (unsigned
// int)84,...}, members that are zero left out. The text takes DumpSize
// bytes of the record; a longer one is cut, and ends in "...". A record
// that holds one is built in a per-CPU buffer (DumpMap), past the 512
// bytes of stack a program has.

// DumpSize is the room of a structure's text, with its NUL.
const DumpSize = 1024

// DumpMap is the per-CPU buffer a record with a structure is built in.
const DumpMap = "dumps"

// btfCompact is BTF_F_COMPACT: no newlines or indentation.
const btfCompact = 1

// btfPtrOff is the stack's struct btf_ptr {void *ptr; u32 type_id; u32
// flags;} (the strings' room, free once the columns are built).
const btfPtrOff = strOff

// HasDump reports whether an action prints a structure.
func HasDump(act Action) bool {
	_, ok := dumpOperand(act)
	return ok
}

func dumpOperand(act Action) (Operand, bool) {
	for _, o := range act.operands() {
		if o.Dump {
			return o, true
		}
	}
	return Operand{}, false
}

// dump resolves *path: the structure path points to, which BTF describes:
// a pointer argument or member, or a tracepoint field cast to a struct
// pointer (*((struct sk_buff *)skbaddr)).
func (c *compiler) dump(o Operand) (value, error) {
	if c.t.Event.userSpace() {
		return value{}, c.errAt(o.Pos, "*%s: a structure is printed from the kernel's BTF, which describes kernel memory only", o.Base)
	}
	if c.t.BTF == nil {
		return value{}, c.errAt(o.Pos, "*%s: a structure is printed from the kernel's BTF (/sys/kernel/btf/vmlinux)", o.Base)
	}
	inner := o
	inner.Dump = false
	var ptr value
	var target btf.Type
	var err error
	if inner.Cast != "" && len(inner.Steps) == 0 {
		// *((struct T *)field): the field's value, typed by the cast.
		if target, err = c.structByName(inner.Cast); err != nil {
			return value{}, c.errAt(o.Pos, "%v", err)
		}
		inner.Cast = ""
		if ptr, err = c.resolve(inner); err != nil {
			return value{}, err
		}
		if ptr.kind != kInt || ptr.size != c.ptrSize() {
			return value{}, c.errAt(o.Pos, "*%s: %s is %s, not an address", o.Base, ptr.name, ptr.describe())
		}
	} else {
		if ptr, err = c.resolve(inner); err != nil {
			return value{}, err
		}
		if ptr.kind == kString && ptr.ptr != nil {
			ptr = *ptr.ptr
		}
		p, ok := btf.UnderlyingType(ptr.btfType).(*btf.Pointer)
		if ptr.kind != kInt || !ok {
			return value{}, c.errAt(o.Pos, "*%s: %s is %s of no type BTF knows: cast it, as in *((struct NAME *)%s)", o.Base, ptr.name, ptr.describe(), o.Base)
		}
		if target, err = c.t.BTF.Complete(p.Target); err != nil {
			return value{}, c.errAt(o.Pos, "*%s: %v", o.Base, err)
		}
	}
	var id btf.TypeID
	switch t := btf.UnderlyingType(target).(type) {
	case *btf.Struct:
		id, err = c.t.BTF.ID(t.Name, kbtf.KindStruct)
	case *btf.Union:
		id, err = c.t.BTF.ID(t.Name, kbtf.KindUnion)
	default:
		return value{}, c.errAt(o.Pos, "*%s: it points to %s: only a struct or union is printed whole", o.Base, kbtf.TypeName(target))
	}
	if err != nil {
		return value{}, c.errAt(o.Pos, "*%s: %v", o.Base, err)
	}
	return value{name: o.Text, kind: kDump, ptr: &ptr, dumpID: id}, nil
}

// regDump holds the per-CPU buffer a record with structures is built in
// (R8: free once the columns are built; a call's return keeps its stash in
// R9).
const regDump = bpf.R8

// emitDumps builds a record with structures in the per-CPU buffer, which
// it leaves in regDump: the stack's record (head bytes below base, then
// the columns but the structures, stackSize bytes) is copied, then each
// structure is written at its column: from its pointer (the stack's at
// l.ptrs), or, at a call's return, copied from the stash.
func (c *compiler) emitDumps(prog *Program, l laid, head int) {
	total := head + prog.Size
	c.emit(bpf.Mov.Imm(bpf.R1, 0).WithSource(bpf.Comment(fmt.Sprintf("the record, %d bytes, is built in %s[0]: a structure's text does not fit the stack", total, DumpMap))))
	c.emit(bpf.StoreMem(bpf.RFP, countKey, bpf.R1, bpf.Word))
	c.emit(bpf.LoadMapPtr(bpf.R1, 0).WithReference(DumpMap),
		bpf.Mov.Reg(bpf.R2, bpf.RFP), bpf.Add.Imm(bpf.R2, countKey), bpf.FnMapLookupElem.Call(),
		bpf.JEq.Imm(bpf.R0, 0, "reject"),
		bpf.Mov.Reg(regDump, bpf.R0))
	// The columns before the first structure: the stack's layout is the
	// record's up to there.
	for off := -head; off < l.stackSize; off += 8 {
		c.emit(bpf.LoadMem(bpf.R1, bpf.RFP, l.base+int16(off), bpf.DWord), bpf.StoreMem(regDump, int16(head+off), bpf.R1, bpf.DWord))
	}
	k := 0
	for _, col := range prog.Columns {
		if !col.big() {
			continue
		}
		at := head + col.Offset
		if col.Frames {
			c.emit(
				bpf.Mov.Reg(bpf.R1, asm.RegCtx).WithSource(bpf.Comment(fmt.Sprintf("bpf_get_stack(ctx, record+%d, %d, 0): the kernel's stack, innermost first, zeroed after its last frame (all of it on a failure)", at, col.Size))),
				bpf.Mov.Reg(bpf.R2, regDump),
				bpf.Add.Imm(bpf.R2, int32(at)),
				bpf.Mov.Imm(bpf.R3, int32(col.Size)),
				bpf.Mov.Imm(bpf.R4, 0),
				bpf.FnGetStack.Call(),
			)
			k++
			continue
		}
		if col.stashed >= 0 {
			// Written at the call's entry: copied from its stash.
			for off := 0; off < DumpSize; off += 8 {
				ins := bpf.LoadMem(bpf.R1, regStash, int16(col.stashed+off), bpf.DWord)
				if off == 0 {
					ins = ins.WithSource(bpf.Comment(fmt.Sprintf("%s, as the entry wrote it", col.Name)))
				}
				c.emit(ins, bpf.StoreMem(regDump, int16(at+off), bpf.R1, bpf.DWord))
			}
			k++
			continue
		}
		done, cut := c.label("dumped"), c.label("cut")
		c.emit(
			bpf.LoadMem(bpf.R1, bpf.RFP, l.ptrs[k], bpf.DWord).WithSource(bpf.Comment(fmt.Sprintf("bpf_snprintf_btf(record+%d, %d, {%s, type %d}, compact)", at, DumpSize, col.Name, col.dumpID))),
			bpf.StoreMem(bpf.RFP, btfPtrOff, bpf.R1, bpf.DWord),
			bpf.Mov.Imm(bpf.R1, int32(col.dumpID)),
			bpf.StoreMem(bpf.RFP, btfPtrOff+8, bpf.R1, bpf.Word),
			bpf.StoreImm(bpf.RFP, btfPtrOff+12, 0, bpf.Word),
			bpf.Mov.Reg(bpf.R1, regDump),
			bpf.Add.Imm(bpf.R1, int32(at)),
			bpf.Mov.Imm(bpf.R2, DumpSize),
			bpf.Mov.Reg(bpf.R3, bpf.RFP),
			bpf.Add.Imm(bpf.R3, btfPtrOff),
			bpf.Mov.Imm(bpf.R4, 16),
			bpf.Mov.Imm(bpf.R5, btfCompact),
			bpf.FnSnprintfBtf.Call(),
			bpf.JSGT.Imm(bpf.R0, DumpSize-1, cut),
			bpf.Ja.Label(done),
		)
		c.mark(cut)
		// Cut: the text ends in "..." and its NUL.
		c.emit(
			bpf.Mov.Imm(bpf.R1, int32('.'|'.'<<8|'.'<<16)).WithSource(bpf.Comment("longer than its room: it ends in \"...\"")),
			bpf.StoreMem(regDump, int16(at+DumpSize-4), bpf.R1, bpf.Word),
		)
		c.mark(done)
		k++
	}
}

// dumpMap is the per-CPU buffer of a record of size bytes.
func dumpMap(size int) *ebpf.MapSpec {
	return &ebpf.MapSpec{Name: "filter_dumps", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: uint32(size), MaxEntries: 1}
}
