package asm

import (
	"fmt"

	bpf "github.com/cilium/ebpf/asm"
)

// RowSearch finds, among the n unwind rows of the array map rowsMap that
// start at index lo, the last whose address (the u32 at offset 0 of a row)
// is at or below target, and leaves its index in lo. It takes steps fixed
// steps (n must be at most 1<<steps) and no branch on the data: each step
// adds half of n to lo under a mask made from the sign of target-row, so
// the verifier walks one path. (A multiply by 0 or 1, not an AND with a
// 0/-1 mask: 6.18's verifier forks its state on the mask, 2^steps paths.) target, lo and n must be callee-saved
// registers (R6-R9); target and every row address must be below 1<<32.
// keyOff is a 4-byte stack slot for the lookup key; fail is jumped to if a
// row is outside the map. R0-R5 are clobbered.
func RowSearch(prefix, rowsMap string, target, lo, n bpf.Register, steps int, keyOff int16, fail string) bpf.Instructions {
	var insns bpf.Instructions
	for i := 0; i < steps; i++ {
		step := bpf.Instructions{
			bpf.Mov.Reg(bpf.R1, n),
			bpf.RSh.Imm(bpf.R1, 1),
			bpf.Add.Reg(bpf.R1, lo),
			bpf.StoreMem(bpf.RFP, keyOff, bpf.R1, bpf.Word),
			bpf.LoadMapPtr(bpf.R1, 0).WithReference(rowsMap),
			bpf.Mov.Reg(bpf.R2, bpf.RFP),
			bpf.Add.Imm(bpf.R2, int32(keyOff)),
			bpf.FnMapLookupElem.Call(),
			bpf.JEq.Imm(bpf.R0, 0, fail),
			bpf.LoadMem(bpf.R1, bpf.R0, 0, bpf.Word),
			bpf.Mov.Reg(bpf.R2, target),
			bpf.Sub.Reg(bpf.R2, bpf.R1),
			bpf.RSh.Imm(bpf.R2, 63),
			bpf.Xor.Imm(bpf.R2, 1),
			bpf.Mov.Reg(bpf.R3, n),
			bpf.RSh.Imm(bpf.R3, 1),
			bpf.Mul.Reg(bpf.R2, bpf.R3),
			bpf.Add.Reg(lo, bpf.R2),
			bpf.Sub.Reg(n, bpf.R3),
		}
		if i == 0 {
			step[0] = step[0].WithSource(bpf.Comment(fmt.Sprintf(
				"%s = last row at or below %s among %s rows from %s: %d steps of lo += (row[lo+n/2] <= %s) * n/2; n -= n/2",
				lo, target, n, lo, steps, target)))
		}
		step[0] = step[0].WithSymbol(fmt.Sprintf("%s_step%d", prefix, i))
		insns = append(insns, step...)
	}
	return insns
}
