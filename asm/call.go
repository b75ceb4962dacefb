package asm

import (
	"fmt"

	bpf "github.com/cilium/ebpf/asm"
)

// A call seen whole: its entry stashes a record per thread, its return
// finds that record again. Calls nest (recursion, and a function called
// again from a signal handler), so a thread's records form a stack: a
// depth per thread (depthMap: u32 tid → u64) and the records (stashMap:
// u64 key {u32 tid; u32 depth} → the record, whose first 8 bytes are that
// key and next 8 the entry's time). Returns come in the reverse order of
// their entries, each at the depth its entry left.
//
// Entries of both maps stay once made, and are written in place: a
// thread's next call finds its depth and its record's slot already there
// (a lookup, where an insert and a delete per call cost twice as much).
// A record's time is cleared when its return has read it; a record whose
// time is set is a call in progress, or one whose return never came (its
// thread exited inside it, or longjmp'd out). Both maps are LRU hashes, so
// what a run keeps is bounded, and what is left behind is pushed out by
// newer calls. A return with no record (the call began before the program
// was attached) does nothing.

// CallPush is the entry's half. The record is on the stack at recOff,
// size bytes (a multiple of 8); its first 8 bytes are the key, filled
// here. tidOff is 4 bytes of stack for the tid. The thread's depth grows
// by one; past maxDepth it still counts, so that the returns stay paired,
// but nothing is stashed. Ends with a jump to done. With tidKnown, the
// tid is at tidOff already (stored by the pid filter's helper call).
func CallPush(prefix, depthMap, stashMap string, tidOff, recOff int16, size int, maxDepth int32, tidKnown bool, done string) bpf.Instructions {
	first, push, insert := prefix+"_first", prefix+"_push", prefix+"_insert"
	var s Seq
	note := fmt.Sprintf("%s[tid]++: the call's depth in its thread", depthMap)
	if !tidKnown {
		s.Add(bpf.FnGetCurrentPidTgid.Call().WithSource(bpf.Comment(note)))
		s.Add(StoreKey(tidOff, bpf.R0, bpf.Word))
		note = ""
	}
	lookup := MapLookup(depthMap, tidOff)
	if note != "" {
		lookup[0] = lookup[0].WithSource(bpf.Comment(note))
	}
	s.Append(lookup)
	s.Add(bpf.JEq.Imm(bpf.R0, 0, first))
	s.Add(bpf.LoadMem(bpf.R1, bpf.R0, 0, bpf.DWord))
	s.Add(bpf.Mov.Reg(bpf.R2, bpf.R1))
	s.Add(bpf.Add.Imm(bpf.R2, 1))
	s.Add(bpf.StoreMem(bpf.R0, 0, bpf.R2, bpf.DWord).WithSource(bpf.Comment("one thread runs on one CPU at a time: no atomic needed")))
	s.Add(bpf.Ja.Label(push))
	s.Add(bpf.Mov.Imm(bpf.R1, 1).WithSymbol(first).WithSource(bpf.Comment("the thread's first call: depth 0, and 1 stored")))
	// The record's key slot holds the 1 for a moment: the update copies it.
	s.Add(bpf.StoreMem(bpf.RFP, recOff, bpf.R1, bpf.DWord))
	s.Append(MapUpdate(depthMap, tidOff, recOff, UpdateAny))
	s.Add(bpf.Mov.Imm(bpf.R1, 0))
	s.Add(bpf.JGE.Imm(bpf.R1, maxDepth, done).WithSymbol(push).WithSource(bpf.Comment(fmt.Sprintf("deeper than %d: counted, not stashed", maxDepth))))
	s.Add(bpf.StoreMem(bpf.RFP, recOff+4, bpf.R1, bpf.Word).WithSource(bpf.Comment(fmt.Sprintf("%s[{tid, depth}] = the record: in place where the slot is there", stashMap))))
	s.Add(bpf.LoadMem(bpf.R1, bpf.RFP, tidOff, bpf.Word))
	s.Add(bpf.StoreMem(bpf.RFP, recOff, bpf.R1, bpf.Word))
	s.Append(MapLookup(stashMap, recOff))
	s.Add(bpf.JEq.Imm(bpf.R0, 0, insert))
	for off := 8; off < size; off += 8 {
		s.Add(bpf.LoadMem(bpf.R1, bpf.RFP, recOff+int16(off), bpf.DWord))
		s.Add(bpf.StoreMem(bpf.R0, int16(off), bpf.R1, bpf.DWord))
	}
	s.Add(bpf.Ja.Label(done))
	update := MapUpdate(stashMap, recOff, recOff, UpdateAny)
	update[0] = update[0].WithSymbol(insert)
	s.Append(update)
	s.Add(bpf.Ja.Label(done))
	return s.Instructions
}

// CallPop is the return's half: the thread's depth shrinks by one, and
// the record stashed at that depth is left in dst, a register helpers
// keep (R6-R9). keyOff is 8 bytes of stack for the record's key, tidOff 4
// for the tid, timeOff the record's time. Jumps to none when the thread
// has no call in progress, or its record is not there or was read.
func CallPop(prefix, depthMap, stashMap string, tidOff, keyOff, timeOff int16, maxDepth int32, dst bpf.Register, none string) bpf.Instructions {
	var s Seq
	s.Add(bpf.FnGetCurrentPidTgid.Call().WithSource(bpf.Comment(fmt.Sprintf("%s[tid]--: the depth its entry was at", depthMap))))
	s.Add(StoreKey(tidOff, bpf.R0, bpf.Word))
	s.Append(MapLookup(depthMap, tidOff))
	s.Add(bpf.JEq.Imm(bpf.R0, 0, none).WithSource(bpf.Comment("no call in progress: it began before the probe")))
	s.Add(bpf.LoadMem(bpf.R1, bpf.R0, 0, bpf.DWord))
	s.Add(bpf.JEq.Imm(bpf.R1, 0, none))
	s.Add(bpf.Add.Imm(bpf.R1, -1))
	s.Add(bpf.StoreMem(bpf.R0, 0, bpf.R1, bpf.DWord))
	s.Add(bpf.JGE.Imm(bpf.R1, maxDepth, none).WithSource(bpf.Comment(fmt.Sprintf("deeper than %d: never stashed", maxDepth))))
	s.Add(bpf.LoadMem(bpf.R2, bpf.RFP, tidOff, bpf.Word).WithSource(bpf.Comment("key = {tid, depth}")))
	s.Add(bpf.StoreMem(bpf.RFP, keyOff, bpf.R2, bpf.Word))
	s.Add(bpf.StoreMem(bpf.RFP, keyOff+4, bpf.R1, bpf.Word))
	s.Append(MapLookup(stashMap, keyOff))
	s.Add(bpf.JEq.Imm(bpf.R0, 0, none).WithSource(bpf.Comment("pushed out of the LRU, or never stashed")))
	s.Add(bpf.LoadMem(bpf.R1, bpf.R0, timeOff, bpf.DWord))
	s.Add(bpf.JEq.Imm(bpf.R1, 0, none).WithSource(bpf.Comment("read by its return already: this entry was not stashed")))
	s.Add(bpf.Mov.Reg(dst, bpf.R0))
	return s.Instructions
}

// CallDone marks the record rec points to as read: its time cleared.
func CallDone(rec bpf.Register, timeOff int16) bpf.Instructions {
	return bpf.Instructions{
		bpf.Mov.Imm(bpf.R1, 0).WithSource(bpf.Comment("the call is over: its record's time cleared")),
		bpf.StoreMem(rec, timeOff, bpf.R1, bpf.DWord),
	}
}
