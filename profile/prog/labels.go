package prog

import (
	"encoding/binary"
	"fmt"

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
)

// Label is one value read at each sample.
type Label struct {
	Kind LabelKind
	Size int // LabelInt: the integer's bytes
}

// The limits of labels: how many, and the bytes of a string kept (its
// terminator included: 63 characters).
const (
	MaxLabels   = 8
	LabelStrLen = 64
)

func (l Label) slot() int {
	if l.Kind == LabelInt {
		return 8
	}
	return LabelStrLen
}

// Where a label is, per process: a LabelLoc per label, in the labels map's
// value.
const (
	LocUnset = 0 // not in this process (or not found)
	LocAbs   = 1 // at the address A (a global)
	LocTP    = 2 // at the thread pointer + A (a thread-local of static TLS)

	LabelLocSize = 24
)

// LabelLoc is one label's location in a process.
type LabelLoc struct {
	Mode uint32
	A, B uint64 // B: 0, kept for the DTV's module
}

// AppendTo appends l as the labels map's value holds it, LabelLocSize
// bytes: {u32 mode; u32 0; u64 A; u64 B}, as labels() reads it.
func (l LabelLoc) AppendTo(b []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, l.Mode)
	b = binary.LittleEndian.AppendUint32(b, 0)
	b = binary.LittleEndian.AppendUint64(b, l.A)
	return binary.LittleEndian.AppendUint64(b, l.B)
}

// keyMask is the key's byte of label bits: bit i set when label i was read.
const keyMask = keyBase + 6

// labelsSize is the bytes the labels take in the key.
func (c Config) labelsSize() int {
	n := 0
	for _, l := range c.Labels {
		n += l.slot()
	}
	return n
}

// LabelOffset is where label i sits in a key (from the key's start).
func (c Config) LabelOffset(i int) int {
	off := 8 + 8*(c.KernelDepth+c.UserDepth)
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
	if len(cfg.Labels) == 0 {
		return nil
	}
	insns := asm.Note(asm.MapLookup("labels", fpTgid), "user context: r7 = where this process keeps the labels (none yet: unset)")
	insns = append(insns,
		bpf.JEq.Imm(bpf.R0, 0, "labels_done"),
		bpf.Mov.Reg(bpf.R7, bpf.R0),
		bpf.FnGetCurrentTask.Call().WithSource(bpf.Comment(fmt.Sprintf("the thread pointer: *(current + %d), 0 when unreadable", cfg.ThreadPointer))),
		bpf.Mov.Reg(bpf.R3, bpf.R0),
		bpf.Add.Imm(bpf.R3, int32(cfg.ThreadPointer)),
		bpf.Mov.Reg(bpf.R1, bpf.RFP),
		bpf.Add.Imm(bpf.R1, fpTP),
		bpf.Mov.Imm(bpf.R2, 8),
		cfg.Readers.Kernel.Call(),
	)
	for i, l := range cfg.Labels {
		p := fmt.Sprintf("label%d", i)
		loc := int16(LabelLocSize * i)
		insns = append(insns,
			bpf.LoadMem(bpf.R1, bpf.R7, loc, bpf.Word).WithSource(bpf.Comment(fmt.Sprintf("label %d: its address, by the location's mode", i))),
			bpf.LoadMem(bpf.R3, bpf.R7, loc+8, bpf.DWord),
			bpf.JEq.Imm(bpf.R1, LocAbs, p+"_read"),
			bpf.JNE.Imm(bpf.R1, LocTP, p+"_next"),
			bpf.LoadMem(bpf.R2, bpf.RFP, fpTP, bpf.DWord),
			bpf.JEq.Imm(bpf.R2, 0, p+"_next"),
			bpf.Add.Reg(bpf.R3, bpf.R2),
			bpf.Mov.Reg(bpf.R1, bpf.R8).WithSymbol(p+"_read"),
			bpf.Add.Imm(bpf.R1, int32(keyBase+cfg.LabelOffset(i))),
		)
		switch l.Kind {
		case LabelInt:
			insns = append(insns,
				bpf.Mov.Imm(bpf.R2, int32(l.Size)).WithSource(bpf.Comment(fmt.Sprintf("an integer of %d bytes", l.Size))),
				cfg.Readers.User.Call(),
				bpf.JEq.Imm(bpf.R0, 0, p+"_set"),
			)
		case LabelStr:
			insns = append(insns,
				bpf.Mov.Reg(bpf.R1, bpf.RFP).WithSource(bpf.Comment("a char *: the pointer, then the string")),
				bpf.Add.Imm(bpf.R1, fpRead),
				bpf.Mov.Imm(bpf.R2, 8),
				cfg.Readers.User.Call(),
				bpf.JNE.Imm(bpf.R0, 0, p+"_next"),
				bpf.LoadMem(bpf.R3, bpf.RFP, fpRead, bpf.DWord),
				bpf.JEq.Imm(bpf.R3, 0, p+"_next"),
				bpf.Mov.Reg(bpf.R1, bpf.R8),
				bpf.Add.Imm(bpf.R1, int32(keyBase+cfg.LabelOffset(i))),
			)
			fallthrough
		case LabelChars:
			insns = append(insns,
				bpf.Mov.Imm(bpf.R2, LabelStrLen).WithSource(bpf.Comment("the string, cut and terminated at the slot's end (a failed read zeroes it)")),
				cfg.Readers.UserStr.Call(),
				bpf.JSGT.Imm(bpf.R0, 0, p+"_set"),
			)
		}
		insns = append(insns,
			bpf.Ja.Label(p+"_next"),
			bpf.LoadMem(bpf.R1, bpf.R8, keyMask, bpf.Byte).WithSymbol(p+"_set"),
			bpf.Or.Imm(bpf.R1, 1<<i),
			bpf.StoreMem(bpf.R8, keyMask, bpf.R1, bpf.Byte),
			asm.Nop().WithSymbol(p+"_next"),
		)
	}
	return append(insns, asm.Nop().WithSymbol("labels_done"))
}
