package asm

import (
	"fmt"

	bpf "github.com/cilium/ebpf/asm"
)

// Stack mode (ksnoop -s): the events of the last of a list of functions
// pass only while the others are running in the thread, each called from
// within the one before (directly or not). Each outer function i has a
// program at its entry and one at its return, which keep the thread's
// record in an LRU hash (key: the u32 tid) up to date, 16 bytes per
// function (StackSlot):
//
//	u32 depth  the thread's calls of i in progress
//	u32 open   those of them that began inside an open call of i-1 (any, for i = 0)
//	u64 bits   which depths are those: bit d for the call at depth d
//
// A return knows from bits whether its call was counted in open, so
// recursion pairs exactly, to a depth of StackMaxDepth (a deeper call is
// never counted). The last function's program passes only when open of
// the one before it is not 0 (StackInside). A thread's record is its
// own: it alone writes it, one program at a time, so no atomics are
// needed. A return that never comes (longjmp, a thread that exits in a
// call) leaves its call counted until the LRU pushes the record out.
const (
	StackSlot     = 16
	StackMaxDepth = 64
)

// StackValueSize is the record of n outer functions.
func StackValueSize(n int) int { return n * StackSlot }

// stackRecord puts the thread's record in R0 (its tid at keyOff, 4
// bytes), jumping to none when it has none.
func stackRecord(mapName string, keyOff int16, none string) bpf.Instructions {
	insns := bpf.Instructions{
		bpf.FnGetCurrentPidTgid.Call().WithSource(bpf.Comment(fmt.Sprintf("%s[tid]: the thread's calls of the outer functions", mapName))),
		StoreKey(keyOff, bpf.R0, bpf.Word),
	}
	insns = append(insns, MapLookup(mapName, keyOff)...)
	return append(insns, bpf.JEq.Imm(bpf.R0, 0, none))
}

// StackEntry is the program at the entry of outer function i of n.
func StackEntry(mapName string, i, n int) bpf.Instructions {
	const keyOff = -4
	valOff := int16(-8 - StackValueSize(n))
	slot := int16(i * StackSlot)
	var s Seq
	s.Append(stackRecord(mapName, keyOff, "make"))
	s.Add(bpf.Ja.Label("have"))
	s.Add(bpf.Mov.Imm(bpf.R1, 0).WithSymbol("make").WithSource(bpf.Comment("the thread's first call: its record, zeroed")))
	for off := 0; off < StackValueSize(n); off += 8 {
		s.Add(bpf.StoreMem(bpf.RFP, valOff+int16(off), bpf.R1, bpf.DWord))
	}
	s.Append(MapUpdate(mapName, keyOff, valOff, UpdateNoExist))
	s.Append(MapLookup(mapName, keyOff))
	s.Add(bpf.JEq.Imm(bpf.R0, 0, "out").WithSource(bpf.Comment("the map is full of threads in calls: not counted")))
	s.Add(bpf.LoadMem(bpf.R1, bpf.R0, slot, bpf.Word).WithSymbol("have").WithSource(bpf.Comment(fmt.Sprintf("function %d's calls in progress", i))))
	if i > 0 {
		s.Add(bpf.LoadMem(bpf.R2, bpf.R0, slot-StackSlot+4, bpf.Word).WithSource(bpf.Comment(fmt.Sprintf("counted only inside an open call of function %d", i-1))))
		s.Add(bpf.JEq.Imm(bpf.R2, 0, "deeper"))
	}
	s.Add(bpf.JGE.Imm(bpf.R1, StackMaxDepth, "deeper"))
	s.Add(bpf.Mov.Imm(bpf.R2, 1).WithSource(bpf.Comment("bits |= 1 << depth; open++")))
	s.Add(bpf.LSh.Reg(bpf.R2, bpf.R1))
	s.Add(bpf.LoadMem(bpf.R3, bpf.R0, slot+8, bpf.DWord))
	s.Add(bpf.Or.Reg(bpf.R3, bpf.R2))
	s.Add(bpf.StoreMem(bpf.R0, slot+8, bpf.R3, bpf.DWord))
	s.Add(bpf.LoadMem(bpf.R2, bpf.R0, slot+4, bpf.Word))
	s.Add(bpf.Add.Imm(bpf.R2, 1))
	s.Add(bpf.StoreMem(bpf.R0, slot+4, bpf.R2, bpf.Word))
	s.Add(bpf.Add.Imm(bpf.R1, 1).WithSymbol("deeper"))
	s.Add(bpf.StoreMem(bpf.R0, slot, bpf.R1, bpf.Word))
	s.Append(Return("out", 0))
	return s.Instructions
}

// StackReturn is the program at the return of outer function i.
func StackReturn(mapName string, i int) bpf.Instructions {
	const keyOff = -4
	slot := int16(i * StackSlot)
	var s Seq
	s.Append(stackRecord(mapName, keyOff, "out"))
	s.Add(bpf.LoadMem(bpf.R1, bpf.R0, slot, bpf.Word).WithSource(bpf.Comment(fmt.Sprintf("function %d's calls in progress fall by one", i))))
	s.Add(bpf.JEq.Imm(bpf.R1, 0, "out").WithSource(bpf.Comment("none: it began before the probe")))
	s.Add(bpf.Add.Imm(bpf.R1, -1))
	s.Add(bpf.StoreMem(bpf.R0, slot, bpf.R1, bpf.Word))
	s.Add(bpf.JGE.Imm(bpf.R1, StackMaxDepth, "out"))
	s.Add(bpf.Mov.Imm(bpf.R2, 1).WithSource(bpf.Comment("if bits & 1 << depth: it was counted; bits ^= it, open--")))
	s.Add(bpf.LSh.Reg(bpf.R2, bpf.R1))
	s.Add(bpf.LoadMem(bpf.R3, bpf.R0, slot+8, bpf.DWord))
	s.Add(bpf.Mov.Reg(bpf.R4, bpf.R3))
	s.Add(bpf.And.Reg(bpf.R4, bpf.R2))
	s.Add(bpf.JEq.Imm(bpf.R4, 0, "out"))
	s.Add(bpf.Xor.Reg(bpf.R3, bpf.R2))
	s.Add(bpf.StoreMem(bpf.R0, slot+8, bpf.R3, bpf.DWord))
	s.Add(bpf.LoadMem(bpf.R2, bpf.R0, slot+4, bpf.Word))
	s.Add(bpf.Add.Imm(bpf.R2, -1))
	s.Add(bpf.StoreMem(bpf.R0, slot+4, bpf.R2, bpf.Word))
	s.Append(Return("out", 0))
	return s.Instructions
}

// StackInside jumps to reject unless the thread is inside an open,
// counted call of the last outer function, n-1 (of n): the chain is
// whole. keyOff is 4 bytes of stack.
func StackInside(mapName string, n int, keyOff int16, reject string) bpf.Instructions {
	insns := stackRecord(mapName, keyOff, reject)
	return append(insns,
		bpf.LoadMem(bpf.R1, bpf.R0, int16((n-1)*StackSlot+4), bpf.Word).WithSource(bpf.Comment("the functions before are open, in their order")),
		bpf.JEq.Imm(bpf.R1, 0, reject),
	)
}
