package asm

import (
	"fmt"

	bpf "github.com/cilium/ebpf/asm"
)

// A call seen whole: its entry stashes a record per thread, its return
// finds that record again. Calls nest (recursion, and a function called
// again from a signal handler), so a thread's records form a stack, in
// one LRU hash (stashMap): key {u32 tid; u32 depth} → the record, whose
// first 8 bytes are that key, the next 8 the entry's time (CallTime) and
// the next 8, in the record at depth 0 only, the thread's calls in
// progress (CallDepth). Returns come in the reverse order of their
// entries, each at the depth its entry left. A call that does not nest
// costs one lookup at its entry and one at its return; a nested one,
// two.
//
// Records stay once made, and are written in place: a thread's next call
// finds its slot already there (a lookup, where an insert and a delete
// per call cost twice as much). A record's time is cleared when its return
// has read it; a record whose time is set is a call in progress, or one
// whose return never came (its thread exited inside it, or longjmp'd
// out). The map is an LRU hash, so what a run keeps is bounded, and what
// is left behind is pushed out by newer calls. A return with no record
// (the call began before the program was attached) does nothing.
const (
	CallTime  = 8
	CallDepth = 16
	// CallRecord is where a record's own values begin.
	CallRecord = 24
)

// CallPush is the entry's half. The record is at src+recOff (the stack,
// RFP, or a map value), size bytes (a multiple of 8, at least
// CallRecord), its time set; its key and depth are filled here. The tid
// is at tidOff (4 bytes), stored by the caller. Past maxDepth a call still counts, so that the returns stay
// paired, but nothing is stashed. Ends with a jump to done.
func CallPush(prefix, stashMap string, tidOff int16, src bpf.Register, recOff int16, size int, maxDepth int32, done string) bpf.Instructions {
	outer, insert, copyIn := prefix+"_outer", prefix+"_insert", prefix+"_copy"
	// arg points reg at the record, as a helper's key or value.
	arg := func(reg bpf.Register) bpf.Instructions {
		return bpf.Instructions{bpf.Mov.Reg(reg, src), bpf.Add.Imm(reg, int32(recOff))}
	}
	lookup := func() bpf.Instructions {
		insns := bpf.Instructions{bpf.LoadMapPtr(bpf.R1, 0).WithReference(stashMap)}
		return append(append(insns, arg(bpf.R2)...), bpf.FnMapLookupElem.Call())
	}
	var s Seq
	s.Add(bpf.LoadMem(bpf.R1, bpf.RFP, tidOff, bpf.Word).WithSource(bpf.Comment(fmt.Sprintf("%s[{tid, 0}]: the thread's outermost call, and how many it has in progress", stashMap))))
	s.Add(bpf.StoreMem(src, recOff, bpf.R1, bpf.Word))
	s.Add(bpf.Mov.Imm(bpf.R1, 0))
	s.Add(bpf.StoreMem(src, recOff+4, bpf.R1, bpf.Word))
	s.Add(bpf.StoreMem(src, recOff+CallDepth, bpf.R1, bpf.DWord).WithSource(bpf.Comment("a nested record's count: unused")))
	s.Append(lookup())
	s.Add(bpf.JNE.Imm(bpf.R0, 0, outer))
	s.Add(bpf.Mov.Imm(bpf.R1, 1).WithSource(bpf.Comment("the thread's first call: its record made, one call in progress")))
	s.Add(bpf.StoreMem(src, recOff+CallDepth, bpf.R1, bpf.DWord))
	s.Add(bpf.Ja.Label(insert))
	s.Add(bpf.LoadMem(bpf.R1, bpf.R0, CallDepth, bpf.DWord).WithSymbol(outer))
	s.Add(bpf.Mov.Reg(bpf.R2, bpf.R1))
	s.Add(bpf.Add.Imm(bpf.R2, 1))
	s.Add(bpf.StoreMem(bpf.R0, CallDepth, bpf.R2, bpf.DWord).WithSource(bpf.Comment("one thread runs on one CPU at a time: no atomic needed")))
	s.Add(bpf.JEq.Imm(bpf.R1, 0, copyIn).WithSource(bpf.Comment("the outermost call: its record is this one")))
	s.Add(bpf.JGE.Imm(bpf.R1, maxDepth, done).WithSource(bpf.Comment(fmt.Sprintf("nested: %s[{tid, depth}]; deeper than %d: counted, not stashed", stashMap, maxDepth))))
	s.Add(bpf.StoreMem(src, recOff+4, bpf.R1, bpf.Word))
	s.Append(lookup())
	s.Add(bpf.JEq.Imm(bpf.R0, 0, insert))
	// The record into the slot in R0, in place: from its time on, but the
	// count (the outermost record's own).
	for off := CallTime; off < size; off += 8 {
		if off == CallDepth {
			continue
		}
		ins := bpf.LoadMem(bpf.R1, src, recOff+int16(off), bpf.DWord)
		if off == CallTime {
			ins = ins.WithSymbol(copyIn)
		}
		s.Add(ins)
		s.Add(bpf.StoreMem(bpf.R0, int16(off), bpf.R1, bpf.DWord))
	}
	s.Add(bpf.Ja.Label(done))
	update := bpf.Instructions{bpf.LoadMapPtr(bpf.R1, 0).WithReference(stashMap).WithSymbol(insert)}
	update = append(append(append(update, arg(bpf.R2)...), arg(bpf.R3)...), bpf.Mov.Imm(bpf.R4, UpdateAny), bpf.FnMapUpdateElem.Call())
	s.Append(update)
	s.Add(bpf.Ja.Label(done))
	return s.Instructions
}

// CallPop is the return's half: the thread's calls in progress fall by
// one, and the record stashed at the depth that leaves is put in dst, a
// register helpers keep (R6-R9). keyOff is 8 bytes of stack for a key,
// tidOff 4 for the tid. Jumps to none when the thread has no call in
// progress, or its record is not there or was read.
func CallPop(prefix, stashMap string, tidOff, keyOff int16, maxDepth int32, dst bpf.Register, none string) bpf.Instructions {
	found := prefix + "_found"
	var s Seq
	s.Add(bpf.FnGetCurrentPidTgid.Call().WithSource(bpf.Comment(fmt.Sprintf("%s[{tid, 0}]: the calls in progress fall by one", stashMap))))
	s.Add(StoreKey(tidOff, bpf.R0, bpf.Word))
	s.Add(StoreKey(keyOff, bpf.R0, bpf.Word))
	s.Add(bpf.Mov.Imm(bpf.R1, 0))
	s.Add(bpf.StoreMem(bpf.RFP, keyOff+4, bpf.R1, bpf.Word))
	s.Append(MapLookup(stashMap, keyOff))
	s.Add(bpf.JEq.Imm(bpf.R0, 0, none).WithSource(bpf.Comment("no call in progress: it began before the probe")))
	s.Add(bpf.LoadMem(bpf.R1, bpf.R0, CallDepth, bpf.DWord))
	s.Add(bpf.JEq.Imm(bpf.R1, 0, none))
	s.Add(bpf.Add.Imm(bpf.R1, -1))
	s.Add(bpf.StoreMem(bpf.R0, CallDepth, bpf.R1, bpf.DWord))
	s.Add(bpf.JEq.Imm(bpf.R1, 0, found).WithSource(bpf.Comment("the outermost call: this record")))
	s.Add(bpf.JGE.Imm(bpf.R1, maxDepth, none).WithSource(bpf.Comment(fmt.Sprintf("nested: %s[{tid, depth}]; deeper than %d: never stashed", stashMap, maxDepth))))
	s.Add(bpf.StoreMem(bpf.RFP, keyOff+4, bpf.R1, bpf.Word))
	s.Append(MapLookup(stashMap, keyOff))
	s.Add(bpf.JEq.Imm(bpf.R0, 0, none).WithSource(bpf.Comment("pushed out of the LRU")))
	s.Add(bpf.LoadMem(bpf.R1, bpf.R0, CallTime, bpf.DWord).WithSymbol(found))
	s.Add(bpf.JEq.Imm(bpf.R1, 0, none).WithSource(bpf.Comment("read by its return already: this entry was not stashed")))
	s.Add(bpf.Mov.Reg(dst, bpf.R0))
	return s.Instructions
}

// CallDone marks the record rec points to as read: its time cleared.
func CallDone(rec bpf.Register) bpf.Instructions {
	return bpf.Instructions{
		bpf.Mov.Imm(bpf.R1, 0).WithSource(bpf.Comment("the call is over: its record's time cleared")),
		bpf.StoreMem(rec, CallTime, bpf.R1, bpf.DWord),
	}
}
