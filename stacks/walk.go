package stacks

import (
	"encoding/binary"
	"time"

	"github.com/tracekit/tracekit/stacks/prog"
	"github.com/tracekit/tracekit/unwind"
)

// Space is what a walk of a copied stack asks of the process it came
// from: where an address is and how to step from it. The pipeline's is
// procSpace (the process's mappings and the row table); the replay
// corpus's answers what the run it was taken from answered.
type Space interface {
	// At says what is at lookup (pc, or pc-1 for a return address).
	At(lookup uint64) Place
	// SigreturnIn says whether pc is the signal return trampoline of the
	// file lookup is in.
	SigreturnIn(lookup, pc uint64) bool
	// Sigreturn says whether pc is the signal return trampoline of its
	// own file.
	Sigreturn(pc uint64) bool
}

// Place is what is at an address: in a file's mapping or in JIT code
// (Known), in a file's (InFile), the rule of the file's row for it
// (HaveRule; a file without a table has none), or a table or mapping not
// read yet, worth waiting for (Wait).
type Place struct {
	Known, InFile bool
	Rule          uint32
	HaveRule      bool
	Wait          time.Duration
}

// walkRegs are a walk's registers where the kernel left it: the pc, its
// lookup address (pc-1 for a return address), sp, bp (x29, s0) and lr
// (arm64's x30, riscv64's ra).
type walkRegs struct{ PC, SP, BP, LR, Lookup uint64 }

// stackReader reads 8 bytes at an address of a stack copied from sp (the
// copy's first address: Arch.CopyBelow under the stack pointer).
func stackReader(sp uint64, stack []byte) func(uint64) (uint64, bool) {
	return func(addr uint64) (uint64, bool) {
		if addr < sp || addr-sp > uint64(len(stack)) || uint64(len(stack))-(addr-sp) < 8 {
			return 0, false
		}
		return binary.LittleEndian.Uint64(stack[addr-sp:]), true
	}
}

// walkCopy walks a copied user stack as the kernel's walker does (frame
// in prog), from registers r, reading memory through read and asking
// space where each address is: at most room frames, why the walk ended,
// whether a frame-pointer step was taken, and how long it may wait for a
// table or mapping not read yet (0: it waits for nothing). It is a pure
// function of its arguments: the replay corpus runs it without a kernel.
func walkCopy(arch prog.Arch, mode string, space Space, r walkRegs, read func(uint64) (uint64, bool), room int) (frames []uint64, stop int32, fp bool, wait time.Duration) {
	pc, sp, bp, lr, lookup := r.PC, r.SP, r.BP, r.LR, r.Lookup
	// The kernel walks at most UserDepth frames: the sample has s.n.
	for {
		var next, cfa uint64
		pl := space.At(lookup)
		if pl.Wait > 0 {
			return frames, prog.StopNoTable, fp, pl.Wait
		}
		rule, haveRule := pl.Rule, pl.HaveRule
		var why int32 = prog.StopNoTable
		if haveRule && arch != prog.X86_64 {
			// arm64's word (see prog's stepLR): x30 holds the return
			// address of a frame that saved none, known where pc is exact
			// (riscv64: ra, also where s0 alone is saved).
			dr := unwind.DecodeARM64(rule)
			inLR := dr.Saves == unwind.SavesNone || dr.Saves == unwind.SavesFP
			if dr.Base == unwind.BaseStop {
				if why = int32(dr.Offset & unwind.KindMask); why == prog.StopEnd {
					return frames, prog.StopEnd, fp, 0
				}
			} else if !inLR || lookup == pc {
				cfa = sp + uint64(dr.Offset)
				if dr.Base == unwind.BaseRBP {
					cfa = bp + uint64(dr.Offset)
				}
				ok := true
				switch dr.Saves {
				case unwind.SavesNone:
					next = lr
				case unwind.SavesRA:
					next, ok = read(cfa + uint64(dr.Slot))
				case unwind.SavesPair:
					var ok2 bool
					bp, ok = read(cfa + uint64(dr.Slot))
					next, ok2 = read(cfa + uint64(dr.Slot) + 8)
					ok = ok && ok2
				case unwind.SavesFP:
					bp, ok = read(cfa + uint64(dr.Slot))
					next = lr
				}
				if !ok {
					return frames, prog.StopRead, fp, 0
				}
				sp = cfa
				if arch == prog.ARM64 {
					next &= prog.UserAddressMask
				}
				goto step
			} else {
				why = prog.StopUnsupported
			}
		} else if haveRule {
			dr := unwind.Decode(rule)
			switch dr.Base {
			case unwind.BaseRSP:
				cfa = sp + uint64(dr.Offset)
			case unwind.BaseRBP:
				cfa = bp + uint64(dr.Offset)
			case unwind.BasePLT:
				cfa = sp + 8
				if pc&15 >= uint64(dr.Offset) {
					cfa += 8
				}
			case unwind.BaseStop:
				why = int32(dr.Offset)
				if dr.Deref {
					// A realigned frame (DRAP): the CFA and the caller's
					// rbp are on the stack, below the saved rbp.
					c, ok1 := read(bp + uint64(dr.CFAAt))
					saved, ok2 := read(bp + uint64(dr.RBPAt))
					ra, ok3 := read(c - 8)
					if !ok1 || !ok2 || !ok3 {
						return frames, prog.StopRead, fp, 0
					}
					sp, bp, next = c, saved, ra
					goto step
				}
			}
			if dr.Base != unwind.BaseStop {
				ra, ok := read(cfa - 8)
				if !ok {
					return frames, prog.StopRead, fp, 0
				}
				if dr.RBPSaved {
					if bp, ok = read(cfa + uint64(dr.RBPOffset)); !ok {
						return frames, prog.StopRead, fp, 0
					}
				}
				sp, next = cfa, ra
				goto step
			}
			if why == prog.StopEnd {
				return frames, prog.StopEnd, fp, 0
			}
		} else if mode == prog.UnwindAuto && pl.Known && bp == 0 {
			return frames, prog.StopEnd, fp, 0
		} else if mode == prog.UnwindAuto && pl.Known && plausibleFrame(arch, sp, bp) && !(arch != prog.X86_64 && pl.InFile && space.SigreturnIn(lookup, pc)) {
			// Known to have no table (JIT code, a file without one): the
			// frame pointer, where it is plausible, as the kernel steps.
			// Never where the mapping is unknown (a process gone before
			// its maps were read): there it is a guess about nothing.
			// riscv64's frame record is below s0, the caller's sp.
			record, above := bp, bp+16
			if arch == prog.RISCV64 {
				record, above = bp-16, bp
			}
			saved, ok1 := read(record)
			ra, ok2 := read(record + 8)
			if !ok1 || !ok2 {
				return frames, prog.StopRead, fp, 0
			}
			if arch == prog.ARM64 {
				ra &= prog.UserAddressMask
			}
			sp, bp, next, fp = above, saved, ra, true
			goto step
		}
		// No step: the signal trampoline, or the end.
		if space.Sigreturn(pc) {
			// The interrupted code's registers, in the signal frame.
			var ok [4]bool
			rsp, rip, rbp := prog.SignalRSP, prog.SignalRSP+8, prog.SignalRBP
			switch arch {
			case prog.ARM64:
				rsp, rip, rbp = prog.SignalSPARM64, prog.SignalSPARM64+8, prog.SignalX29ARM64
				lr, ok[3] = read(sp + prog.SignalX29ARM64 + 8)
			case prog.RISCV64:
				rsp, rip, rbp = prog.SignalSPRISCV64, prog.SignalPCRISCV64, prog.SignalS0RISCV64
				lr, ok[3] = read(sp + prog.SignalPCRISCV64 + 8)
			default:
				ok[3] = true
			}
			at := sp
			sp, ok[0] = read(at + uint64(rsp))
			pc, ok[1] = read(at + uint64(rip))
			bp, ok[2] = read(at + uint64(rbp))
			if ok != [4]bool{true, true, true, true} {
				return frames, prog.StopRead, fp, 0
			}
			lookup = pc
			if len(frames) >= room {
				return frames, prog.StopTruncated, fp, 0
			}
			if pc == 0 {
				return frames, prog.StopEnd, fp, 0
			}
			frames = append(frames, pc)
			continue
		}
		return frames, why, fp, 0
	step:
		if next == 0 {
			return frames, prog.StopEnd, fp, 0
		}
		if len(frames) >= room {
			return frames, prog.StopTruncated, fp, 0
		}
		pc, lookup = next, next-1
		frames = append(frames, pc)
	}
}

// plausibleFrame reports whether bp may be a frame pointer at sp, as the
// kernel judges it (noTable in prog): above sp (arm64: from sp-8, where
// Go's frames keep it), within prog.MaxFrame, aligned.
func plausibleFrame(arch prog.Arch, sp, bp uint64) bool {
	low := bp
	if arch == prog.ARM64 {
		low += 8
		return low >= sp && low-sp <= prog.MaxFrame && bp&7 == 0
	}
	return low > sp && low-sp <= prog.MaxFrame && bp&7 == 0
}

// The replay corpus's hooks (replay_test.go), unset in every run of the
// tools: recordWalk gets each deferred sample's walk with what its space
// answered; deferAll keeps every process's mappings out of the kernel's
// trie, so that every sample is deferred to user space and walked here.
var (
	recordWalk func(ps *processes, s *deferredSample, userOffset int, frames []uint64, stop int32, fp bool)
	deferAll   bool
)

// recordingSpace answers as its Space does and keeps each answer.
type recordingSpace struct {
	Space
	places     []PlaceAt
	sigreturns []SigreturnAt
}

// PlaceAt is a Place and the address it was asked about.
type PlaceAt struct {
	Lookup uint64
	Place
}

// SigreturnAt is an answer of SigreturnIn (Lookup set) or Sigreturn.
type SigreturnAt struct {
	Lookup, PC uint64
	In, Is     bool
}

func (r *recordingSpace) At(lookup uint64) Place {
	pl := r.Space.At(lookup)
	r.places = append(r.places, PlaceAt{lookup, pl})
	return pl
}

func (r *recordingSpace) SigreturnIn(lookup, pc uint64) bool {
	is := r.Space.SigreturnIn(lookup, pc)
	r.sigreturns = append(r.sigreturns, SigreturnAt{Lookup: lookup, PC: pc, In: true, Is: is})
	return is
}

func (r *recordingSpace) Sigreturn(pc uint64) bool {
	is := r.Space.Sigreturn(pc)
	r.sigreturns = append(r.sigreturns, SigreturnAt{PC: pc, Is: is})
	return is
}
