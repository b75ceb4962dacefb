package asm

import (
	"fmt"

	bpf "github.com/cilium/ebpf/asm"
)

// A call seen whole: its entry stashes a record per thread, its return
// finds that record again. Calls nest (recursion, and a function called
// again from a signal handler), so a thread's records form a stack: a
// depth per thread (depthMap: u32 tid → u64) and the records
// (stashMap: u64 key {u32 tid; u32 depth} → the record, whose first 8
// bytes are that key, so that the return can delete it). Returns come in
// the reverse order of their entries, each at the depth its entry left.
//
// A call whose return never comes (its thread exits inside it, or longjmps
// out) leaves a record behind; both maps are LRU hashes, so what is left
// is bounded and pushed out by newer calls, and the thread's next call at
// that depth replaces it. A return with no record (the call began before
// the program was attached) does nothing.

// CallPush is the entry's half. The record is on the stack at recOff
// (its first 8 bytes are left for the key, filled here); tidOff is 4 bytes
// of stack for the tid. The thread's depth grows by one; past maxDepth it
// still counts, so that the returns stay paired, but nothing is stashed.
// Ends with a jump to done.
func CallPush(prefix, depthMap, stashMap string, tidOff, recOff int16, maxDepth int32, done string) bpf.Instructions {
	first, push := prefix+"_first", prefix+"_push"
	var s Seq
	s.Add(bpf.FnGetCurrentPidTgid.Call().WithSource(bpf.Comment(fmt.Sprintf("%s[tid]++: the call's depth in its thread", depthMap))))
	s.Add(StoreKey(tidOff, bpf.R0, bpf.Word))
	s.Append(MapLookup(depthMap, tidOff))
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
	s.Add(bpf.StoreMem(bpf.RFP, recOff+4, bpf.R1, bpf.Word).WithSource(bpf.Comment(fmt.Sprintf("%s[{tid, depth}] = the record", stashMap))))
	s.Add(bpf.LoadMem(bpf.R1, bpf.RFP, tidOff, bpf.Word))
	s.Add(bpf.StoreMem(bpf.RFP, recOff, bpf.R1, bpf.Word))
	s.Append(MapUpdate(stashMap, recOff, recOff, UpdateAny))
	s.Add(bpf.Ja.Label(done))
	return s.Instructions
}

// CallPop is the return's half: the thread's depth shrinks by one (its
// entry is deleted at 0), and the record stashed at that depth is left in
// dst, a register helpers keep (R6-R9). keyOff is 8 bytes of stack for
// the record's key, tidOff 4 for the tid. Jumps to none when the thread
// has no call in progress or its record is not there.
func CallPop(prefix, depthMap, stashMap string, tidOff, keyOff int16, maxDepth int32, dst bpf.Register, none string) bpf.Instructions {
	find := prefix + "_find"
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
	s.Add(bpf.JNE.Imm(bpf.R1, 0, find))
	s.Append(Note(MapDelete(depthMap, tidOff), fmt.Sprintf("the outermost return: delete %s[tid]", depthMap)))
	lookup := MapLookup(stashMap, keyOff)
	lookup[0] = lookup[0].WithSymbol(find)
	s.Append(lookup)
	s.Add(bpf.JEq.Imm(bpf.R0, 0, none).WithSource(bpf.Comment("pushed out of the LRU, or never stashed")))
	s.Add(bpf.Mov.Reg(dst, bpf.R0))
	return s.Instructions
}

// CallDrop deletes the record rec points to (its key is its first 8
// bytes), through 8 bytes of stack at keyOff.
func CallDrop(stashMap string, rec bpf.Register, keyOff int16) bpf.Instructions {
	var s Seq
	s.Add(bpf.LoadMem(bpf.R1, rec, 0, bpf.DWord).WithSource(bpf.Comment(fmt.Sprintf("delete %s[{tid, depth}]: the call is over", stashMap))))
	s.Add(bpf.StoreMem(bpf.RFP, keyOff, bpf.R1, bpf.DWord))
	s.Append(MapDelete(stashMap, keyOff))
	return s.Instructions
}
