package prog

import (
	"fmt"
	"math/bits"

	"github.com/tracekit/tracekit/asm"

	bpf "github.com/cilium/ebpf/asm"

	"github.com/tracekit/tracekit/unwind"
)

// rowSearch finds, among the n unwind rows of a file whose first row is
// row lo of the table (a multiple of unwind.BlockRows), the last whose
// address (the u32 at offset 0 of a row) is at or below target, and leaves
// a pointer to that row in R0: the file's first row when target is below
// them all, which the caller checks. The table is laid out as
// unwind.Blocks does, in two array maps: fencesMap, one value holding the
// first address of every block (u32s, fenceMask+1 of them, a power of
// two), read in place through its address (no call, nothing for the
// verifier to patch); and rowsMap, whose values are blocks of
// unwind.BlockRows rows, one of them looked up, in chunks: rowsMap is an
// array of maps whose value k is the array of blocks k<<chunkShift on (its
// size 1<<chunkShift), so that the table takes kernel memory a chunk at a
// time as files are loaded. No branch on the data:
// up to unwind.FenceSteps among the file's fences (as many as its blocks
// need: the steps end when one is left), then unwind.BlockSteps within
// the block, each adding half of what is left to
// lo under a multiply by 0 or 1 made from the sign of target-address. (A
// multiply, not an AND with a 0/-1 mask: 6.18's verifier forks its state
// on the mask, 2^steps paths.) target, lo and n must be callee-saved
// registers (R6-R9); target and every address must be below 1<<32; lo and
// n are clobbered. keyOff is a 4-byte stack slot for the block's key;
// fail is jumped to if the block is outside the map. R0-R5 are clobbered.
func rowSearch(prefix, rowsMap, fencesMap string, fenceMask int32, chunkShift int, target, lo, n bpf.Register, keyOff int16, fail string) bpf.Instructions {
	var insns asm.Seq
	insns.Add(bpf.RSh.Imm(lo, unwind.BlockSteps).WithSymbol(prefix).WithSource(bpf.Comment(fmt.Sprintf(
		"%s = the last block starting at or below %s among the file's (%s+%d)/%d from %s/%d: %d steps of lo += (fence[lo+n/2] <= %s) * n/2; n -= n/2",
		lo, target, n, unwind.BlockRows-1, unwind.BlockRows, lo, unwind.BlockRows, unwind.FenceSteps, target))))
	insns.Add(bpf.Add.Imm(n, unwind.BlockRows-1))
	insns.Add(bpf.RSh.Imm(n, unwind.BlockSteps))
	insns.Add(bpf.LoadMapValue(bpf.R4, 0, 0).WithReference(fencesMap))
	insns.Add(bpf.Mov.Reg(bpf.R5, target).WithSource(bpf.Comment(fmt.Sprintf("r5 = %s + 1: an address is at or below %s if address - r5 is negative", target, target))))
	insns.Add(bpf.Add.Imm(bpf.R5, 1))
	for i := 0; i < unwind.FenceSteps; i++ {
		// n is 1 once the block is found: a file of few blocks (most
		// are, and every frame of a deep recursion is in one) skips the
		// steps left, each a chain of dependent loads and a multiply.
		jump := bpf.JLE.Imm(n, 1, prefix+"_block").WithSymbol(fmt.Sprintf("%s_fence%d", prefix, i))
		if i == 0 {
			jump = jump.WithSource(bpf.Comment(fmt.Sprintf("until %s is 1: the steps a file's blocks need, at most %d", n, unwind.FenceSteps)))
		}
		insns.Add(jump)
		insns.Add(bpf.Mov.Reg(bpf.R1, n))
		insns.Add(bpf.RSh.Imm(bpf.R1, 1))
		insns.Add(bpf.Mov.Reg(bpf.R2, lo))
		insns.Add(bpf.Add.Reg(bpf.R2, bpf.R1))
		insns.Add(bpf.And.Imm(bpf.R2, fenceMask))
		insns.Add(bpf.LSh.Imm(bpf.R2, 2))
		insns.Add(bpf.Add.Reg(bpf.R2, bpf.R4))
		insns.Add(bpf.LoadMem(bpf.R3, bpf.R2, 0, bpf.Word))
		insns.Append(atOrBelow(bpf.R3))
		insns.Add(bpf.Mul.Reg(bpf.R3, bpf.R1))
		insns.Add(bpf.Add.Reg(lo, bpf.R3))
		insns.Add(bpf.Sub.Reg(n, bpf.R1))
	}
	insns.Add(bpf.Mov.Reg(bpf.R1, lo).WithSymbol(prefix + "_block").WithSource(bpf.Comment(fmt.Sprintf("r0 = the block: %s[%s >> %d][%s & %d]; then the last row at or below %s in it: %d steps of r0 += (r0[half] <= %s) * half rows",
		rowsMap, lo, chunkShift, lo, 1<<chunkShift-1, target, unwind.BlockSteps, target))))
	insns.Add(bpf.RSh.Imm(bpf.R1, int32(chunkShift)))
	insns.Add(bpf.StoreMem(bpf.RFP, keyOff, bpf.R1, bpf.Word))
	insns.Add(bpf.LoadMapPtr(bpf.R1, 0).WithReference(rowsMap))
	insns.Add(bpf.Mov.Reg(bpf.R2, bpf.RFP))
	insns.Add(bpf.Add.Imm(bpf.R2, int32(keyOff)))
	insns.Add(bpf.FnMapLookupElem.Call())
	insns.Add(bpf.JEq.Imm(bpf.R0, 0, fail))
	insns.Add(bpf.And.Imm(lo, 1<<chunkShift-1))
	insns.Add(bpf.StoreMem(bpf.RFP, keyOff, lo, bpf.Word))
	insns.Add(bpf.Mov.Reg(bpf.R1, bpf.R0))
	insns.Add(bpf.Mov.Reg(bpf.R2, bpf.RFP))
	insns.Add(bpf.Add.Imm(bpf.R2, int32(keyOff)))
	insns.Add(bpf.FnMapLookupElem.Call())
	insns.Add(bpf.JEq.Imm(bpf.R0, 0, fail))
	// The pointer itself moves: a row is 8 bytes, so a step of half rows
	// adds the condition shifted by log2(8*half). (The calls clobbered R5.)
	insns.Add(bpf.Mov.Reg(bpf.R5, target))
	insns.Add(bpf.Add.Imm(bpf.R5, 1))
	for half := int32(unwind.BlockRows / 2); half > 0; half >>= 1 {
		insns.Add(bpf.LoadMem(bpf.R3, bpf.R0, int16(8*half), bpf.Word).WithSymbol(fmt.Sprintf("%s_row%d", prefix, half)))
		insns.Append(atOrBelow(bpf.R3))
		insns.Add(bpf.LSh.Imm(bpf.R3, int32(bits.TrailingZeros32(uint32(8*half)))))
		insns.Add(bpf.Add.Reg(bpf.R0, bpf.R3))
	}
	return insns.Instructions
}

// atOrBelow turns the address in cond into 1 if it is at or below the
// target, else 0, without a branch: the sign bit of address - R5, R5
// being target + 1 (both below 1<<32).
func atOrBelow(cond bpf.Register) bpf.Instructions {
	return bpf.Instructions{
		bpf.Sub.Reg(cond, bpf.R5),
		bpf.RSh.Imm(cond, 63),
	}
}
