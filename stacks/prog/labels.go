package prog

import (
	"encoding/binary"
	"fmt"
	"math"

	bpf "github.com/cilium/ebpf/asm"

	"github.com/tracekit/tracekit/asm"
)

// User context (seed 000, strobemeta): at each sample the program reads a
// few values the sampled thread keeps in its own memory (thread-locals,
// globals) into the key, so that each stack is counted per context. What
// to read is the same for every process (the labels' kinds, fixed in the
// program); where it is differs per process and is written by user space
// into the labels map, keyed by pid, as each process is seen.

// LabelKind says how a label's value is read and kept in the key.
type LabelKind uint8

const (
	LabelInt   LabelKind = iota // Size bytes (1, 2, 4 or 8), in an 8-byte slot
	LabelStr                    // a char * at the location: the string it points to
	LabelChars                  // a char[] at the location
	// The seed's layouts (strobemeta.h): a strobe_value_header {u16 len;
	// u8 reserved[6]}, then an int64, a char * or a strobe_map_raw *.
	LabelStrobeInt // set while the header's len is not 0
	LabelStrobeStr
	LabelStrobeMap // {int64 id; int64 cnt; char *tag; {char *key, *val} entries[]}
)

// Label is one value read at each sample.
type Label struct {
	Kind LabelKind
	Size int // LabelInt: the integer's bytes
}

// The limits of labels: how many, and the bytes of a string kept (its
// terminator included: 63 characters). A strobe map keeps its id, its
// tag and its first StrobeMapEntries entries, their strings in
// StrobeMapStrLen bytes (31 characters): StrobeMapSlot bytes of the key,
// {int64 id; char tag[32]; {char key[32], val[32]} entries[3]}.
const (
	MaxLabels        = 8
	LabelStrLen      = 64
	StrobeMapEntries = 3
	StrobeMapStrLen  = 32
	StrobeMapSlot    = 8 + StrobeMapStrLen + StrobeMapEntries*2*StrobeMapStrLen
)

func (l Label) slot() int {
	switch l.Kind {
	case LabelInt, LabelStrobeInt:
		return 8
	case LabelStrobeMap:
		return StrobeMapSlot
	}
	return LabelStrLen
}

// Where a label is, per process: a LabelLoc per label, in the labels map's
// value.
const (
	LocUnset = 0 // not in this process (or not found)
	LocAbs   = 1 // at the address A (a global)
	LocTP    = 2 // at the thread pointer + A (a thread-local of static TLS)
	LocDTV   = 3 // in the thread's block of module Module, through its DTV

	LabelLocSize = 40
)

// LabelLoc is one label's location in a process. For LocDTV (a shared
// library's thread-local reached through the dynamic thread vector): the
// DTV is the pointer at the thread pointer + DTV; it holds at least
// Module entries when the count at DTV's address + Count does; the
// module's block is the pointer at the DTV's address + A (the entry of
// Module), unset while it is 0 or -1 (not allocated); the value is at
// the block + B. The C library decides DTV, Count and the entries' size.
type LabelLoc struct {
	Mode, Module uint32
	A, B         uint64
	DTV, Count   int64
}

// AppendTo appends l as the labels map's value holds it, LabelLocSize
// bytes: {u32 mode; u32 module; u64 A; u64 B; s64 dtv; s64 count}, as
// labels() reads it.
func (l LabelLoc) AppendTo(b []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, l.Mode)
	b = binary.LittleEndian.AppendUint32(b, l.Module)
	b = binary.LittleEndian.AppendUint64(b, l.A)
	b = binary.LittleEndian.AppendUint64(b, l.B)
	b = binary.LittleEndian.AppendUint64(b, uint64(l.DTV))
	return binary.LittleEndian.AppendUint64(b, uint64(l.Count))
}

// keyMask is the key's byte of label bits: bit i set when label i was read.
const keyMask = keyBase + 6

// labelsSize is the bytes the labels take in the key.
func (c Config) labelsSize() int {
	n := 0
	if c.Context {
		n = 8 // the context's id
	}
	for _, l := range c.Labels {
		n += l.slot()
	}
	return n
}

// LabelOffset is where label i sits in a key (from the key's start).
func (c Config) LabelOffset(i int) int {
	off := 8
	for _, l := range c.Labels[:i] {
		off += l.slot()
	}
	return off
}

// labels reads each label of the sampled thread into the key at R8; the
// tgid is at fpTgid. A value that cannot be read (no location for this
// process, no thread pointer yet, a NULL string, a page not present) is
// left unset: its bit clear, its bytes zero. Uses R7.
func labels(cfg Config) bpf.Instructions {
	if len(cfg.Labels) == 0 && !cfg.Context {
		return nil
	}
	var insns asm.Seq
	insns.Append(asm.Note(asm.MapLookup("labels", fpTgid), "user context: r7 = where this process keeps the labels (none yet: unset)"))
	insns.Add(bpf.JEq.Imm(bpf.R0, 0, "labels_done"))
	insns.Add(bpf.Mov.Reg(bpf.R7, bpf.R0))
	insns.Append(threadPointer(cfg))
	for i, l := range cfg.Labels {
		p := fmt.Sprintf("label%d", i)
		loc := int16(LabelLocSize * i)
		slot := int32(keyBase + cfg.LabelOffset(i))
		insns.Append(locate(p, loc, fmt.Sprintf("label %d: its address, by the location's mode", i), false, cfg))
		insns.Add(bpf.Mov.Reg(bpf.R1, bpf.R8).WithSymbol(p + "_read"))
		insns.Add(bpf.Add.Imm(bpf.R1, slot))
		switch l.Kind {
		case LabelStrobeInt:
			insns.Append(readUser(cfg, fpRead, 16, p+"_next", "a strobe_value_int: header and value in one read"))
			insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpRead, bpf.Half))
			insns.Add(bpf.JEq.Imm(bpf.R1, 0, p+"_next"))
			insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpRead+8, bpf.DWord))
			insns.Add(bpf.StoreMem(bpf.R8, int16(slot), bpf.R1, bpf.DWord))
		case LabelStrobeMap:
			insns.Append(strobeMap(p, slot, cfg))
		case LabelInt:
			insns.Add(bpf.Mov.Imm(bpf.R2, int32(l.Size)).WithSource(bpf.Comment(fmt.Sprintf("an integer of %d bytes", l.Size))))
			insns.Add(cfg.Readers.User.Call())
			insns.Add(bpf.JEq.Imm(bpf.R0, 0, p+"_set"))
		case LabelStr, LabelStrobeStr:
			if l.Kind == LabelStrobeStr {
				insns.Add(bpf.Add.Imm(bpf.R3, 8).WithSource(bpf.Comment("a strobe_value_str: its char * after the header")))
			}
			insns.Append(readUser(cfg, fpRead, 8, p+"_next", "a char *: the pointer, then the string"))
			insns.Add(bpf.LoadMem(bpf.R3, bpf.RFP, fpRead, bpf.DWord))
			insns.Add(bpf.JEq.Imm(bpf.R3, 0, p+"_next"))
			insns.Add(bpf.Mov.Reg(bpf.R1, bpf.R8))
			insns.Add(bpf.Add.Imm(bpf.R1, slot))
			fallthrough
		case LabelChars:
			insns.Add(bpf.Mov.Imm(bpf.R2, LabelStrLen).WithSource(bpf.Comment("the string, cut and terminated at the slot's end (a failed read zeroes it)")))
			insns.Add(cfg.Readers.UserStr.Call())
			insns.Add(bpf.JSGT.Imm(bpf.R0, 0, p+"_set"))
		}
		if l.Kind != LabelStrobeInt && l.Kind != LabelStrobeMap { // those go on to _set
			insns.Add(bpf.Ja.Label(p + "_next"))
		}
		insns.Add(bpf.LoadMem(bpf.R1, bpf.R8, keyMask, bpf.Byte).WithSymbol(p + "_set"))
		insns.Add(bpf.Or.Imm(bpf.R1, 1<<i))
		insns.Add(bpf.StoreMem(bpf.R8, keyMask, bpf.R1, bpf.Byte))
		insns.Add(asm.Nop().WithSymbol(p + "_next"))
	}
	if cfg.Context {
		insns.Append(context(cfg))
	}
	insns.Add(asm.Nop().WithSymbol("labels_done"))
	return insns.Instructions
}

// ThreadPointerMember is, by GOARCH, the thread pointer's member of
// task_struct (Config.ThreadPointer is its offset, from the kernel's BTF).
var ThreadPointerMember = map[string]string{"amd64": "thread.fsbase", "arm64": "thread.uw.tp_value"}

// threadPointer stores the sampled thread's thread pointer at fpTP: a
// load from the BTF task (bpf_get_current_task_btf, 5.11+; with TaskRegs,
// 5.15+), else a bpf_probe_read_kernel of the task (0 when unreadable):
// one helper call less on every sample.
func threadPointer(cfg Config) bpf.Instructions {
	if !cfg.TaskRegs || cfg.ThreadPointer > math.MaxInt16 {
		return currentU64(cfg, cfg.ThreadPointer, fpTP, fmt.Sprintf("the thread pointer: *(current + %d), 0 when unreadable", cfg.ThreadPointer))
	}
	var insns asm.Seq
	insns.Add(bpf.FnGetCurrentTaskBtf.Call().WithSource(bpf.Comment(fmt.Sprintf("the thread pointer: current->(+%d), a load from the BTF task", cfg.ThreadPointer))))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.R0, int16(cfg.ThreadPointer), bpf.DWord))
	insns.Add(bpf.StoreMem(bpf.RFP, fpTP, bpf.R1, bpf.DWord))
	return insns.Instructions
}

// locate computes, in R3, the address of the location at loc in R7's
// value (the thread pointer at fpTP), and goes on to the instruction
// named p+"_read" the caller appends; to p+"_next" when this thread has
// none. flags: the mode carries flags above its low byte.
func locate(p string, loc int16, note string, flags bool, cfg Config) bpf.Instructions {
	var insns asm.Seq
	insns.Add(bpf.LoadMem(bpf.R1, bpf.R7, loc, bpf.Word).WithSource(bpf.Comment(note)))
	insns.Add(bpf.LoadMem(bpf.R3, bpf.R7, loc+8, bpf.DWord))
	if flags {
		insns.Add(bpf.And.Imm(bpf.R1, 0xff))
	}
	insns.Add(bpf.JEq.Imm(bpf.R1, LocAbs, p+"_read"))
	insns.Add(bpf.LoadMem(bpf.R2, bpf.RFP, fpTP, bpf.DWord))
	insns.Add(bpf.JEq.Imm(bpf.R2, 0, p+"_next"))
	insns.Add(bpf.JEq.Imm(bpf.R1, LocTP, p+"_tp"))
	insns.Add(bpf.JNE.Imm(bpf.R1, LocDTV, p+"_next"))
	insns.Append(dtvBlock(p, loc, cfg))
	insns.Add(bpf.Add.Reg(bpf.R3, bpf.R2).WithSymbol(p + "_tp"))
	return insns.Instructions
}

// currentU64 reads the u64 at the current task + off into the stack at
// slot (zero when unreadable); R0 is the read's result.
func currentU64(cfg Config, off int, slot int16, note string) bpf.Instructions {
	var insns asm.Seq
	insns.Add(bpf.FnGetCurrentTask.Call().WithSource(bpf.Comment(note)))
	insns.Add(bpf.Mov.Reg(bpf.R3, bpf.R0))
	insns.Add(bpf.Add.Imm(bpf.R3, int32(off)))
	insns.Add(bpf.Mov.Reg(bpf.R1, bpf.RFP))
	insns.Add(bpf.Add.Imm(bpf.R1, int32(slot)))
	insns.Add(bpf.Mov.Imm(bpf.R2, 8))
	insns.Add(cfg.Readers.Kernel.Call())
	return insns.Instructions
}

// readUser reads size bytes of user memory at R3 into the stack at off;
// to fail when the read fails.
func readUser(cfg Config, off int16, size int32, fail, note string) bpf.Instructions {
	first := bpf.Mov.Reg(bpf.R1, bpf.RFP)
	if note != "" {
		first = first.WithSource(bpf.Comment(note))
	}
	var insns asm.Seq
	insns.Add(first)
	insns.Add(bpf.Add.Imm(bpf.R1, int32(off)))
	insns.Add(bpf.Mov.Imm(bpf.R2, size))
	insns.Add(cfg.Readers.User.Call())
	insns.Add(bpf.JNE.Imm(bpf.R0, 0, fail))
	return insns.Instructions
}

// dtvBlock finds, in R2, the block of a LocDTV label's module in the
// sampled thread (the thread pointer in R2), and its offset in R3, then
// falls through to p+"_tp" (block + offset); goes to p+"_next" when the thread's DTV
// is unreadable, too short for the module (a thread that has not caught up
// with a dlopen), or the block not allocated yet. Three reads of user
// memory: the DTV, its count, the module's entry.
func dtvBlock(p string, loc int16, cfg Config) bpf.Instructions {
	read := func(note string) bpf.Instructions { return readUser(cfg, fpRead, 8, p+"_next", note) }
	var insns asm.Seq
	insns.Add(bpf.LoadMem(bpf.R3, bpf.R7, loc+24, bpf.DWord))
	insns.Add(bpf.Add.Reg(bpf.R3, bpf.R2))
	insns.Append(read("the DTV: the pointer at the thread pointer + dtv"))
	insns.Add(bpf.LoadMem(bpf.R3, bpf.RFP, fpRead, bpf.DWord))
	insns.Add(bpf.JEq.Imm(bpf.R3, 0, p+"_next"))
	insns.Add(bpf.StoreMem(bpf.RFP, fpRead+8, bpf.R3, bpf.DWord))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.R7, loc+32, bpf.DWord))
	insns.Add(bpf.Add.Reg(bpf.R3, bpf.R1))
	insns.Append(read("its count: the module's entry must be in it"))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpRead, bpf.DWord))
	insns.Add(bpf.LoadMem(bpf.R2, bpf.R7, loc+4, bpf.Word))
	insns.Add(bpf.JLT.Reg(bpf.R1, bpf.R2, p+"_next"))
	insns.Add(bpf.LoadMem(bpf.R3, bpf.RFP, fpRead+8, bpf.DWord))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.R7, loc+8, bpf.DWord))
	insns.Add(bpf.Add.Reg(bpf.R3, bpf.R1))
	insns.Append(read("the module's entry: its block, 0 or -1 while not allocated"))
	insns.Add(bpf.LoadMem(bpf.R2, bpf.RFP, fpRead, bpf.DWord))
	insns.Add(bpf.JEq.Imm(bpf.R2, 0, p+"_next"))
	insns.Add(bpf.JEq.Imm(bpf.R2, -1, p+"_next"))
	insns.Add(bpf.LoadMem(bpf.R3, bpf.R7, loc+16, bpf.DWord))
	return insns.Instructions
}

// strobeMap reads a strobe_value_map at R3 into the key's slot: the map's
// id, its tag, and its first StrobeMapEntries entries (no more than its
// cnt), each string cut to StrobeMapStrLen; a NULL or unreadable string is
// left empty. Unset when the map's pointer is NULL or the map unreadable.
// Reads: the pointer, the map's head, the tag, and per entry its two
// pointers and two strings.
func strobeMap(p string, slot int32, cfg Config) bpf.Instructions {
	readStr := func(ptr int16, to int32, skip string) bpf.Instructions {
		return bpf.Instructions{
			bpf.LoadMem(bpf.R3, bpf.RFP, ptr, bpf.DWord),
			bpf.JEq.Imm(bpf.R3, 0, skip),
			bpf.Mov.Reg(bpf.R1, bpf.R8),
			bpf.Add.Imm(bpf.R1, to),
			bpf.Mov.Imm(bpf.R2, StrobeMapStrLen),
			cfg.Readers.UserStr.Call(),
			asm.Nop().WithSymbol(skip),
		}
	}
	var insns asm.Seq
	insns.Add(bpf.Add.Imm(bpf.R3, 8).WithSource(bpf.Comment("a strobe_value_map: its strobe_map_raw * after the header")))
	insns.Append(readUser(cfg, fpMap, 8, p+"_next", ""))
	insns.Add(bpf.LoadMem(bpf.R3, bpf.RFP, fpMap, bpf.DWord))
	insns.Add(bpf.JEq.Imm(bpf.R3, 0, p+"_next"))
	insns.Append(readUser(cfg, fpMapHead, 24, p+"_next", "the map's {id, cnt, tag}"))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpMapHead, bpf.DWord))
	insns.Add(bpf.StoreMem(bpf.R8, int16(slot), bpf.R1, bpf.DWord))
	insns.Append(readStr(fpMapHead+16, slot+8, p+"_tag"))
	for e := 0; e < StrobeMapEntries; e++ {
		to := slot + 8 + StrobeMapStrLen + int32(2*StrobeMapStrLen*e)
		q := fmt.Sprintf("%s_e%d", p, e)
		insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpMapHead+8, bpf.DWord).WithSource(bpf.Comment(fmt.Sprintf("entry %d, when the map has it: its key and value", e))))
		insns.Add(bpf.JSLE.Imm(bpf.R1, int32(e), p+"_set"))
		insns.Add(bpf.LoadMem(bpf.R3, bpf.RFP, fpMap, bpf.DWord))
		insns.Add(bpf.Add.Imm(bpf.R3, int32(24+16*e)))
		insns.Append(readUser(cfg, fpRead, 16, p+"_set", ""))
		insns.Append(readStr(fpRead, to, q+"_key"))
		insns.Append(readStr(fpRead+8, to+StrobeMapStrLen, q+"_val"))
	}
	return insns.Instructions // on to p+"_set"
}
