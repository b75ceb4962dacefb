package unwind

import (
	"fmt"
	"sort"
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
//	bits 10-31 the CFA offset (BasePLT: the cut; BaseStop: a Stop reason)
//
// The return address is always at CFA-8 (checked when compiling).
const (
	BaseRSP  = 0
	BaseRBP  = 1
	BasePLT  = 2
	BaseStop = 3

	rbpShift = 2
	offShift = 10
	maxOff   = 1<<22 - 1
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
	SearchSteps = 20
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

// encode turns a row into a rule word.
func encode(r Row) uint32 {
	if r.RA.Kind == RuleUndefined {
		return stop(StopEnd)
	}
	if r.RA.Kind != RuleOffset || r.RA.Offset != -8 {
		return stop(StopUnsupported)
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
}

// Decode takes a rule word apart.
func Decode(rule uint32) Decoded {
	n := int64(int8(uint8(rule >> rbpShift)))
	return Decoded{Base: rule & 3, RBPSaved: n != 0, RBPOffset: 8 * n, Offset: rule >> offShift}
}

// Compile turns FDEs into sorted entries: identical neighbours merged, a
// StopNoRow entry wherever no FDE covers the addresses that follow.
func Compile(fdes []FDE) ([]Entry, error) {
	sorted := append([]FDE(nil), fdes...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Begin < sorted[j].Begin })
	var out []Entry
	add := func(pc uint64, rule uint32) {
		if n := len(out); n > 0 {
			if out[n-1].PC == uint32(pc) {
				out[n-1].Rule = rule
				if n > 1 && out[n-2].Rule == rule {
					out = out[:n-1]
				}
				return
			}
			if out[n-1].Rule == rule {
				return
			}
		}
		out = append(out, Entry{PC: uint32(pc), Rule: rule})
	}
	for i, f := range sorted {
		if f.End > 1<<32 {
			return nil, fmt.Errorf("address 0x%x is above 4 GiB", f.End)
		}
		end := f.End
		if i+1 < len(sorted) && sorted[i+1].Begin < end {
			end = sorted[i+1].Begin // overlapping FDEs: the next one wins
		}
		for _, r := range f.Rows {
			if r.PC >= end {
				break
			}
			add(r.PC, encode(r))
		}
		if len(f.Rows) == 0 && f.Begin < end {
			add(f.Begin, stop(StopUnsupported))
		}
		if end > f.Begin && (i+1 == len(sorted) || sorted[i+1].Begin > end) {
			add(end, stop(StopNoRow))
		}
	}
	if len(out) > MaxRows {
		return nil, fmt.Errorf("%d unwind rows, more than the %d the unwinder searches", len(out), MaxRows)
	}
	return out, nil
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
