package unwind

import (
	"cmp"
	"debug/elf"
	"fmt"
	"io"
	"slices"
	"unsafe"
)

// Entry is one row as the in-kernel unwinder reads it: from PC (the file's
// virtual address) up to the next entry, Rule says how to step to the
// caller. Eight bytes, so python3.11's 59,613 rows take under 0.5 MiB.
type Entry struct {
	PC   uint32
	Rule uint32
}

// The rule word:
//
//	bits 0-1   CFA base: BaseRSP, BaseRBP, BasePLT or BaseStop
//	bits 2-9   where rbp was saved, CFA + 8*n (n signed, 0: rbp unchanged)
//	bits 10-31 the CFA offset (BasePLT: the cut; BaseStop: a Stop reason,
//	           or DerefRBP)
//
// A BaseStop word whose bits 10-13 are DerefRBP is not a stop but gcc's
// realigned frame (DRAP): CFA = *(rbp + 8*a), the caller's rbp =
// *(rbp + 8*b), a in bits 14-21 and b in bits 22-29 (signed); bits 2-9
// are 0.
//
// The return address is always at CFA-8 (checked when compiling).
//
// arm64's rule word (ARM64). Every row of Debian's arm64 libc saves
// nothing yet (the return address still in x30), or x30 alone, or x29 and
// x30 as a pair (stp x29, x30: x30 8 bytes above x29):
//
//	bits 0-1   CFA base: BaseRSP (sp), BaseRBP (x29) or BaseStop
//	bits 2-3   SavesNone, SavesRA, SavesPair, or riscv64's SavesFP
//	bits 4-16  n: x30 saved at CFA - 8*n (SavesRA); x29 at CFA - 8*n and
//	           x30 at CFA - 8*n + 8 (SavesPair)
//	bits 17-31 the CFA offset in units of 8 (BaseStop: bits 10-13 the
//	           Stop reason)
//
// SavesNone's return address is x30's value: known at the sampled frame
// and at one a signal interrupted, not above.
//
// riscv64's rows take the same word (sp or s0, ra, s0 for x29 and x30).
// Its epilogues restore ra before s0 (ld ra; ld s0), so rows with s0
// still saved and ra back in its register are common (721 of Debian's
// riscv64 libc's 7249): SavesFP, s0 at CFA - 8*n and the return address
// in ra. arm64's words never have it.
const (
	BaseRSP  = 0
	BaseRBP  = 1
	BasePLT  = 2
	BaseStop = 3

	rbpShift = 2
	offShift = 10
	maxOff   = 1<<22 - 1

	// DerefRBP is the kind of a DRAP frame's word (see above), past
	// every Stop reason.
	DerefRBP   = 15
	KindMask   = 15
	DerefShift = offShift + 4 // a, then b 8 bits above
)

// Stop says why the unwinder cannot step past a row.
type Stop uint32

const (
	StopNone        Stop = iota
	StopNoRow            // the address is in no FDE
	StopEnd              // the return address is undefined: the outermost frame (_start)
	StopUnsupported      // a rule the unwinder does not follow (an expression, a register)
	stopCount
)

func (s Stop) String() string {
	switch s {
	case StopNoRow:
		return "no unwind row"
	case StopEnd:
		return "end of stack"
	case StopUnsupported:
		return "unsupported unwind rule"
	}
	return fmt.Sprintf("stop %d", uint32(s))
}

// MaxRows is the most entries one file may have: the in-kernel search
// takes a fixed SearchSteps steps, FenceSteps among its blocks' first
// addresses (the fences) and BlockSteps among one block's BlockRows rows.
const (
	SearchSteps = 21
	MaxRows     = 1 << SearchSteps
	BlockSteps  = 6
	BlockRows   = 1 << BlockSteps
	FenceSteps  = SearchSteps - BlockSteps
)

// Pad fills a file's last block after its rows: above every address the
// search is asked for, and a stop if it were ever chosen.
var Pad = Entry{PC: 1<<32 - 1, Rule: stop(StopNoRow)}

// Blocks lays entries out as the in-kernel table holds them: whole blocks
// of BlockRows rows (the last one padded with Pad), and the fences, the
// first address of each block.
func Blocks(entries []Entry) (rows []Entry, fences []uint32) {
	n := (len(entries) + BlockRows - 1) / BlockRows * BlockRows
	rows = make([]Entry, n)
	copy(rows, entries)
	for i := len(entries); i < n; i++ {
		rows[i] = Pad
	}
	for i := 0; i < n; i += BlockRows {
		fences = append(fences, rows[i].PC)
	}
	return rows, fences
}

func stop(s Stop) uint32 { return BaseStop | uint32(s)<<offShift }

// arm64's fields (see above).
const (
	SavesNone = 0
	SavesRA   = 1
	SavesPair = 2
	SavesFP   = 3 // riscv64 only (see above)

	savesShift = 2
	slotShift  = 4
	maxSlot    = 1<<13 - 1
	cfa8Shift  = 17
	maxCFA8    = 1<<15 - 1
)

// encode turns a row into x86-64's rule word.
func encode(r Row) uint32 { return X86_64.encode(r) }

// encode turns a row into the architecture's rule word.
func (a Arch) encode(r Row) uint32 {
	if a.Machine == elf.EM_AARCH64 || a.Machine == elf.EM_RISCV {
		return a.encodeLR(r)
	}
	return encodeX86(r)
}

// encodeLR is the rule word of a CPU with a link register: arm64's, and
// riscv64's, whose rows have the same shapes (the return address in ra
// until saved; s0 and ra saved as a pair, ra 8 bytes above).
func (a Arch) encodeLR(r Row) uint32 {
	if r.RA.Kind == RuleUndefined {
		return stop(StopEnd)
	}
	if r.CFA.Kind != CFAReg || r.CFA.Offset < 0 || r.CFA.Offset%8 != 0 || r.CFA.Offset/8 > maxCFA8 {
		return stop(StopUnsupported)
	}
	var base uint32
	switch r.CFA.Reg {
	case a.SP:
		base = BaseRSP
	case a.FP:
		base = BaseRBP
	default:
		return stop(StopUnsupported)
	}
	var saves uint32
	var at int64 // the slot, from the CFA
	switch {
	case r.RBP.Kind == RuleSame && r.RA.Kind == RuleSame:
		saves = SavesNone
	case r.RBP.Kind == RuleSame && r.RA.Kind == RuleOffset:
		saves, at = SavesRA, r.RA.Offset
	case r.RBP.Kind == RuleOffset && r.RA.Kind == RuleOffset && r.RA.Offset == r.RBP.Offset+8:
		saves, at = SavesPair, r.RBP.Offset
	case r.RBP.Kind == RuleOffset && r.RA.Kind == RuleSame && a.Machine == elf.EM_RISCV:
		saves, at = SavesFP, r.RBP.Offset
	default:
		return stop(StopUnsupported)
	}
	n := -at / 8
	if saves != SavesNone && (at%8 != 0 || n <= 0 || n > maxSlot) {
		return stop(StopUnsupported)
	}
	return base | saves<<savesShift | uint32(n)<<slotShift | uint32(r.CFA.Offset/8)<<cfa8Shift
}

// encodeX86 turns a row into x86-64's rule word.
func encodeX86(r Row) uint32 {
	if r.RA.Kind == RuleUndefined {
		return stop(StopEnd)
	}
	if r.RA.Kind != RuleOffset || r.RA.Offset != -8 {
		return stop(StopUnsupported)
	}
	if r.CFA.Kind == CFADeref {
		// The caller's rbp is where the frame says, relative to rbp.
		a, b := r.CFA.Offset/8, r.RBP.Offset/8
		if r.RBP.Kind != RuleAtRBP || r.CFA.Offset%8 != 0 || r.RBP.Offset%8 != 0 || a < -128 || a > 127 || b < -128 || b > 127 {
			return stop(StopUnsupported)
		}
		return BaseStop | (DerefRBP|uint32(uint8(int8(a)))<<4|uint32(uint8(int8(b)))<<12)<<offShift
	}
	var rbp uint32
	switch r.RBP.Kind {
	case RuleSame, RuleUndefined:
	case RuleOffset:
		n := r.RBP.Offset / 8
		if r.RBP.Offset%8 != 0 || n < -128 || n > 127 || n == 0 {
			return stop(StopUnsupported)
		}
		rbp = uint32(uint8(int8(n))) << rbpShift
	default:
		return stop(StopUnsupported)
	}
	switch r.CFA.Kind {
	case CFAReg:
		if r.CFA.Offset < 0 || r.CFA.Offset > maxOff || r.CFA.Reg != RegRSP && r.CFA.Reg != RegRBP {
			return stop(StopUnsupported)
		}
		base := uint32(BaseRSP)
		if r.CFA.Reg == RegRBP {
			base = BaseRBP
		}
		return base | rbp | uint32(r.CFA.Offset)<<offShift
	case CFAPLT:
		return BasePLT | rbp | uint32(r.CFA.PLTCut)<<offShift
	}
	return stop(StopUnsupported)
}

// Decoded is a rule word taken apart (for tests and the Go reference).
type Decoded struct {
	Base      uint32
	RBPSaved  bool
	RBPOffset int64
	Offset    uint32
	// Deref: a DRAP frame: CFA = *(rbp + CFAAt), rbp = *(rbp + RBPAt).
	Deref        bool
	CFAAt, RBPAt int64
}

// DecodedARM64 is arm64's rule word taken apart.
type DecodedARM64 struct {
	Base   uint32 // BaseRSP (sp), BaseRBP (x29) or BaseStop
	Offset uint32 // the CFA's offset in bytes; BaseStop: the Stop reason
	Saves  uint32 // SavesNone, SavesRA, SavesPair or SavesFP (riscv64)
	Slot   int64  // SavesRA: x30 at CFA + Slot; SavesPair: x29 there, x30 8 above; SavesFP: x29 there
}

// DecodeARM64 takes arm64's rule word apart.
func DecodeARM64(rule uint32) DecodedARM64 {
	d := DecodedARM64{Base: rule & 3}
	if d.Base == BaseStop {
		d.Offset = rule >> offShift
		return d
	}
	d.Saves = rule >> savesShift & 3
	d.Slot = -8 * int64(rule>>slotShift&maxSlot)
	d.Offset = 8 * (rule >> cfa8Shift)
	return d
}

// Decode takes x86-64's rule word apart.
func Decode(rule uint32) Decoded {
	n := int64(int8(uint8(rule >> rbpShift)))
	d := Decoded{Base: rule & 3, RBPSaved: n != 0, RBPOffset: 8 * n, Offset: rule >> offShift}
	if d.Base == BaseStop && d.Offset&KindMask == DerefRBP {
		d.Deref = true
		d.CFAAt = 8 * int64(int8(uint8(rule>>DerefShift)))
		d.RBPAt = 8 * int64(int8(uint8(rule>>(DerefShift+8))))
	}
	return d
}

// Compile turns FDEs into sorted entries: identical neighbours merged, a
// StopNoRow entry wherever no FDE covers the addresses that follow. Where
// FDEs overlap, the one that begins later wins.
func Compile(fdes []FDE) ([]Entry, error) { return X86_64.Compile(fdes) }

// Compile is Compile for the architecture's rule words.
func (a Arch) Compile(fdes []FDE) ([]Entry, error) {
	var places []fdePlace
	for i, f := range fdes {
		if err := place(&places, f, uint32(i)); err != nil {
			return nil, err
		}
	}
	t, err := layOut(a.orDefault(), places, func(p fdePlace) ([]Row, error) { return fdes[p.at].Rows, nil })
	if err != nil {
		return nil, err
	}
	return t.Entries(), nil
}

// Read compiles the frame section of size bytes that src holds (at virtual
// address addr; debug for .debug_frame) as Compile does, within a bound
// set by the limits, not by the section: see ParseMemory.
func Read(src io.ReaderAt, size int64, addr uint64, debug bool) (*Table, error) {
	return X86_64.Read(src, size, addr, debug)
}

// Read is Read for the architecture's frames and rule words; extra are
// FDEs the section lacks (arm64's PLT, see PLTARM64), added after its own.
// It reads the section twice: first where each FDE is and its range, then
// each FDE's instructions, run in address order as its rows are laid out.
// No FDE's rows are kept but the one's being laid out: its memory is the
// FDEs' places (16 bytes each) and the table (8 bytes a row).
func (a Arch) Read(src io.ReaderAt, size int64, addr uint64, debug bool, extra ...FDE) (*Table, error) {
	a = a.orDefault()
	if size > MaxSection {
		// The time a parse takes grows with the section.
		return nil, limitf("a section of %d MiB, more than %d", size>>20, MaxSection>>20)
	}
	k, err := newWalker(src, size, addr, debug, a)
	if err != nil {
		return nil, err
	}
	var fdes []fdePlace
	for off := uint64(0); off < k.w.size; {
		next, f, isFDE, err := k.entry(off, false)
		if err != nil {
			return nil, err
		}
		if next == 0 {
			break
		}
		if isFDE {
			if err := place(&fdes, f, uint32(off)); err != nil {
				return nil, err
			}
		}
		off = next
	}
	for i, f := range extra {
		if err := place(&fdes, f, extraFDE|uint32(i)); err != nil {
			return nil, err
		}
	}
	return layOut(a, fdes, func(p fdePlace) ([]Row, error) {
		if p.at&extraFDE != 0 {
			return extra[p.at&^extraFDE].Rows, nil
		}
		_, f, _, err := k.entry(uint64(p.at), true)
		return f.Rows, err
	})
}

// place adds f, found at at, to fdes: an FDE with no range is left out.
func place(fdes *[]fdePlace, f FDE, at uint32) error {
	if f.End <= f.Begin {
		return nil
	}
	if f.End >= 1<<32 {
		return fmt.Errorf("an FDE ends at 0x%x, past 4 GiB", f.End)
	}
	if len(*fdes) == MaxFDEs {
		return limitf("more than %d FDEs", MaxFDEs)
	}
	*fdes = append(grow(*fdes, MaxFDEs), fdePlace{begin: uint32(f.Begin), end: uint32(f.End), at: at, seq: uint32(len(*fdes))})
	return nil
}

// layOut sorts the FDEs by address (those with one address in the order
// they were found) and lays their rows (from rows) out in a Table.
func layOut(a Arch, fdes []fdePlace, rows func(fdePlace) ([]Row, error)) (*Table, error) {
	slices.SortFunc(fdes, func(x, y fdePlace) int { return cmp.Or(cmp.Compare(x.begin, y.begin), cmp.Compare(x.seq, y.seq)) })
	l := layer{arch: a}
	for i, p := range fdes {
		r, err := rows(p)
		if err != nil {
			return nil, err
		}
		next := uint32(0)
		if i+1 < len(fdes) {
			next = fdes[i+1].begin
		}
		if err := l.lay(p.begin, p.end, r, next, i+1 < len(fdes)); err != nil {
			return nil, err
		}
	}
	return &l.out, nil
}

// fdePlace is an FDE as Read's first pass finds it: its range, the
// offset of its entry (or, with extraFDE, its index among the extra
// FDEs; Compile: its index), and its place in the order found.
type fdePlace struct {
	begin, end uint32
	at, seq    uint32
}

const extraFDE = 1 << 31 // past MaxSection

// The most one section may hold while it is read: FDEs with a range, and
// rows before neighbours are merged across FDEs (within an FDE they are
// merged as they are read), which bounds the time a parse takes.
// libLLVM-14 has 95,000 FDEs and 948,864 rows after merging, Rust's
// libLLVM 22 1,439,033 rows.
const (
	MaxSection = 256 << 20 // bytes
	MaxFDEs    = 1 << 19
	maxRaw     = MaxRows + MaxRows/4
	rawChunk   = 1 << 16 // rows: a Table's chunk
)

// ParseMemory is the most memory Read allocates for one section, in bytes,
// whatever the section holds (every allocation counted, collected or not):
// the FDEs' places as their slice grows (16 bytes each), the table (8
// bytes a row, in chunks), the rows of the FDE being run and laid out as
// they grow, and the two windows on the section as they grow to its
// largest entry; and 1 MiB for the rest.
const ParseMemory = 2*16*MaxFDEs + 8*(MaxRows+rawChunk) +
	2*maxRowsPerFDE*(int(unsafe.Sizeof(Row{}))+8) + 2*2*maxEntry + 1<<20

// layer lays the rows of FDEs, given in address order, out in a Table:
// rows at or past an FDE's end, or the next FDE's begin, left out (the
// next one wins where they overlap), neighbours with the same rule
// merged, a stop row where no FDE covers an address, and one for an FDE
// whose rows the unwinder cannot follow.
type layer struct {
	arch Arch
	out  Table
	enc  []Entry // the FDE's rows, encoded, reused
	raw  int     // rows before merging across FDEs
}

// lay lays out the FDE [begin, end) whose rows are rows; next is the next
// FDE's begin, if there is one (more).
func (l *layer) lay(begin, end uint32, rows []Row, next uint32, more bool) error {
	l.enc = l.arch.encodeRows(l.enc[:0], rows, end)
	l.raw += len(l.enc)
	if l.raw > maxRaw {
		return limitf("more than %d unwind rows", maxRaw)
	}
	return l.layEncoded(begin, end, l.enc, next, more)
}

// encodeRows appends to dst the rows below end, encoded, but for one
// whose rule is the one before's.
func (a Arch) encodeRows(dst []Entry, rows []Row, end uint32) []Entry {
	first := len(dst)
	for _, r := range rows {
		if r.PC >= uint64(end) {
			break
		}
		rule := a.encode(r)
		if len(dst) > first && dst[len(dst)-1].Rule == rule {
			continue
		}
		dst = append(dst, Entry{PC: uint32(r.PC), Rule: rule})
	}
	return dst
}

func (l *layer) layEncoded(begin, end uint32, rows []Entry, next uint32, more bool) error {
	if more && next < end {
		end = next // overlapping FDEs: the next one wins
	}
	for _, r := range rows {
		if r.PC >= end {
			break
		}
		if err := l.add(r.PC, r.Rule); err != nil {
			return err
		}
	}
	if len(rows) == 0 && begin < end {
		if err := l.add(begin, stop(StopUnsupported)); err != nil {
			return err
		}
	}
	if end > begin && (!more || next > end) {
		return l.add(end, stop(StopNoRow))
	}
	return nil
}

func (l *layer) add(pc uint32, rule uint32) error {
	out := &l.out
	if n := out.n; n > 0 {
		if last := out.last(); last.PC == pc {
			last.Rule = rule
			if n > 1 && out.At(n-2).Rule == rule {
				out.n--
			}
			return nil
		} else if last.Rule == rule {
			return nil
		}
	}
	if out.n == MaxRows {
		return limitf("more than %d unwind rows, the most the unwinder searches", MaxRows)
	}
	out.push(Entry{PC: pc, Rule: rule})
	return nil
}

// grow makes room for one more element, doubling the capacity up to
// limit, never past it (append would grow a full slice of limit elements
// by a quarter more).
func grow[T any](s []T, limit int) []T {
	if len(s) < cap(s) {
		return s
	}
	bigger := make([]T, len(s), min(max(2*cap(s), 256), limit))
	copy(bigger, s)
	return bigger
}

// Table is a file's rows, in address order, kept in chunks of rawChunk
// rows (a multiple of BlockRows: a block is never split), so that no
// allocation is as big as the table.
type Table struct {
	chunks [][]Entry
	n      int
}

// Len is the number of rows (none in a nil Table).
func (t *Table) Len() int {
	if t == nil {
		return 0
	}
	return t.n
}

// At is row i.
func (t *Table) At(i int) Entry { return t.chunks[i/rawChunk][i%rawChunk] }

// Block is the BlockRows rows from row b*BlockRows, the last block padded
// with Pad.
func (t *Table) Block(b int) (block [BlockRows]Entry) {
	first := b * BlockRows
	at := first % rawChunk // a chunk holds whole blocks
	n := copy(block[:], t.chunks[first/rawChunk][at:at+min(BlockRows, t.n-first)])
	for i := n; i < BlockRows; i++ {
		block[i] = Pad
	}
	return block
}

// Blocks is the number of blocks the rows take.
func (t *Table) Blocks() int { return (t.n + BlockRows - 1) / BlockRows }

// Entries is the rows in one slice (nil for a nil Table).
func (t *Table) Entries() []Entry {
	if t == nil {
		return nil
	}
	out := make([]Entry, 0, t.n)
	for i := 0; i < t.n; i += rawChunk {
		out = append(out, t.chunks[i/rawChunk][:min(rawChunk, t.n-i)]...)
	}
	return out
}

func (t *Table) last() *Entry { return &t.chunks[(t.n-1)/rawChunk][(t.n-1)%rawChunk] }

func (t *Table) push(e Entry) {
	if t.n%rawChunk == 0 && t.n/rawChunk == len(t.chunks) {
		t.chunks = append(t.chunks, make([]Entry, rawChunk))
	}
	t.chunks[t.n/rawChunk][t.n%rawChunk] = e
	t.n++
}

// Search is the in-kernel search in Go: the index (from first) of the last
// entry at or below pc among count entries, as the BPF program computes it
// over Blocks' layout. ok is false when pc is below the first entry.
func Search(entries []Entry, pc uint32) (int, bool) {
	return NewLayout(entries).Search(pc)
}

// Layout is a file's entries as Blocks lays them out.
type Layout struct {
	n      int
	rows   []Entry
	fences []uint32
}

func NewLayout(entries []Entry) Layout {
	rows, fences := Blocks(entries)
	return Layout{len(entries), rows, fences}
}

// Search is the in-kernel search: FenceSteps fixed steps among the fences
// for the last block that starts at or below pc, then BlockSteps within
// that block, and no branch on the data. ok is false when pc is below the
// first entry (or only a Pad row is at or below it).
func (l Layout) Search(pc uint32) (int, bool) {
	if l.n == 0 {
		return 0, false
	}
	b, n := 0, len(l.fences)
	for i := 0; i < FenceSteps; i++ {
		half := n >> 1
		if l.fences[b+half] <= pc {
			b += half
		}
		n -= half
	}
	lo := b * BlockRows
	for half := BlockRows / 2; half > 0; half >>= 1 {
		if l.rows[lo+half].PC <= pc {
			lo += half
		}
	}
	return lo, lo < l.n && l.rows[lo].PC <= pc
}

// PLTARM64 is the FDE arm64's linkers do not write for a .plt of size
// bytes at addr: its 32-byte header pushes x16 and x30 (stp x16, x30,
// [sp, #-16]!) and jumps to the resolver; its stubs touch neither sp nor
// x30 (adrp x16; ldr x17; add x16; br x17, after a bti c where branch
// protection asks), so a stub's return address is still in x30.
func PLTARM64(addr, size uint64) FDE {
	const header = 32
	lr := Row{PC: addr, CFA: CFA{Kind: CFAReg, Reg: RegSP}, RBP: Rule{Kind: RuleSame}, RA: Rule{Kind: RuleSame}}
	pushed := Row{PC: addr + 4, CFA: CFA{Kind: CFAReg, Reg: RegSP, Offset: 16}, RBP: Rule{Kind: RuleSame}, RA: Rule{Kind: RuleOffset, Offset: -8}}
	rows := []Row{lr}
	if size > 4 {
		rows = append(rows, pushed)
	}
	if size > header {
		stubs := lr
		stubs.PC = addr + header
		rows = append(rows, stubs)
	}
	return FDE{Begin: addr, End: addr + size, Rows: rows}
}

// PLTRISCV64 is the FDE riscv64's linkers do not write for a .plt: its
// 32-byte header and 16-byte stubs (auipc t3; ld t3; jalr t1, t3; nop)
// touch neither sp nor ra, so the return address is still in ra.
func PLTRISCV64(addr, size uint64) FDE {
	row := Row{PC: addr, CFA: CFA{Kind: CFAReg, Reg: RegRVSP}, RBP: Rule{Kind: RuleSame}, RA: Rule{Kind: RuleSame}}
	return FDE{Begin: addr, End: addr + size, Rows: []Row{row}}
}
