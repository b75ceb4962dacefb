// Package asm holds small builders of eBPF instruction snippets. Each takes a
// label prefix, so that two copies of a snippet in one program never share a
// label, and names maps by symbol only: maps are bound at load time.
//
// Register conventions shared by the snippets: R6 holds the context pointer,
// R7 the current process id (tgid) where a snippet needs it; R1-R5 and R0
// are scratch, as every helper call clobbers them.
package asm

import (
	"fmt"
	"math"

	bpf "github.com/cilium/ebpf/asm"
)

// Register roles, see the package comment.
const (
	RegCtx = bpf.R6
	RegPid = bpf.R7
)

// BPF_ANY and BPF_NOEXIST, the flags of bpf_map_update_elem.
const (
	UpdateAny     = 0
	UpdateNoExist = 1
)

// Prologue saves the context pointer in RegCtx.
func Prologue() bpf.Instructions {
	return bpf.Instructions{
		bpf.Mov.Reg(RegCtx, bpf.R1).WithSource(bpf.Comment("save the context")),
	}
}

// Return ends the program with a constant return value at the given label.
// For tracepoint and kprobe programs 0 discards the event and non-zero lets
// the kernel store it (kernel/trace/bpf_trace.c: trace_call_bpf).
func Return(label string, value int32) bpf.Instructions {
	return bpf.Instructions{
		bpf.Mov.Imm(bpf.R0, value).WithSymbol(label),
		bpf.Return(),
	}
}

// CurrentPid loads the current process id (the tgid, what user space calls
// the pid) into RegPid.
func CurrentPid() bpf.Instructions {
	return bpf.Instructions{
		bpf.FnGetCurrentPidTgid.Call().WithSource(bpf.Comment("pid = bpf_get_current_pid_tgid() >> 32")),
		bpf.Mov.Reg(RegPid, bpf.R0),
		bpf.RSh.Imm(RegPid, 32),
	}
}

// PidNS names a pid namespace for bpf_get_ns_current_pid_tgid (5.7+): the
// inode of /proc/self/ns/pid and its device in the kernel's encoding
// (major<<20 | minor).
type PidNS struct{ Dev, Ino uint64 }

// CurrentNsPid loads the current process id as seen in ns into RegPid: 0
// for a task whose pid namespace is another (the helper compares the task's
// own namespace, not its ancestors). bufOff is 8 bytes of free stack.
func CurrentNsPid(ns PidNS, bufOff int16) bpf.Instructions {
	return append(NsPidTgid(ns, bufOff), bpf.LoadMem(RegPid, bpf.RFP, bufOff+4, bpf.Word))
}

// NsPidTgid calls bpf_get_ns_current_pid_tgid(ns, fp+bufOff, 8), which
// writes struct bpf_pidns_info {u32 pid; u32 tgid;} there: the thread's and
// the process's ids in ns, zeros for a task in another namespace.
func NsPidTgid(ns PidNS, bufOff int16) bpf.Instructions {
	return bpf.Instructions{
		bpf.LoadImm(bpf.R1, int64(ns.Dev), bpf.DWord).
			WithSource(bpf.Comment(fmt.Sprintf("bpf_get_ns_current_pid_tgid(dev %#x, ino %d, fp%d, 8): ids in this pid namespace, 0 outside it", ns.Dev, ns.Ino, bufOff))),
		bpf.LoadImm(bpf.R2, int64(ns.Ino), bpf.DWord),
		bpf.Mov.Reg(bpf.R3, bpf.RFP),
		bpf.Add.Imm(bpf.R3, int32(bufOff)),
		bpf.Mov.Imm(bpf.R4, 8),
		bpf.FnGetNsCurrentPidTgid.Call(),
	}
}

// PidFilter jumps to skip unless RegPid (see CurrentPid) equals pid.
func PidFilter(pid uint32, skip string) bpf.Instructions {
	// A 64-bit compare against a positive immediate: JMP32 forms are 5.1+.
	return bpf.Instructions{
		bpf.JNE.Imm(RegPid, int32(pid), skip).WithSource(bpf.Comment(fmt.Sprintf("only pid %d", pid))),
	}
}

// MemSize is the size of a load or store of n bytes: 1, 2, 4 or 8.
func MemSize(n int) (bpf.Size, bool) {
	switch n {
	case 1:
		return bpf.Byte, true
	case 2:
		return bpf.Half, true
	case 4:
		return bpf.Word, true
	case 8:
		return bpf.DWord, true
	}
	return bpf.InvalidSize, false
}

// LoadField loads an integer field of a tracepoint record (RegCtx) into dst,
// sign-extending signed fields narrower than 64 bits. offset and size come
// from the event's format file, never from a constant.
func LoadField(dst bpf.Register, name string, offset, size int, signed bool) (bpf.Instructions, error) {
	sz, ok := MemSize(size)
	if !ok {
		return nil, fmt.Errorf("field %s: size %d is not an integer size", name, size)
	}
	if offset < 0 || offset > 0x7fff {
		return nil, fmt.Errorf("field %s: offset %d out of range", name, offset)
	}
	insns := bpf.Instructions{
		bpf.LoadMem(dst, RegCtx, int16(offset), sz).
			WithSource(bpf.Comment(fmt.Sprintf("%s = ctx->%s (offset %d, size %d)", dst, name, offset, size))),
	}
	if signed && size < 8 {
		shift := int32(64 - 8*size)
		insns = append(insns, bpf.LSh.Imm(dst, shift), bpf.ArSh.Imm(dst, shift))
	}
	return insns, nil
}

// Log2Slot turns the unsigned value in v into its log2 histogram slot, in
// BCC's layout: slot 1 holds 0 and 1, slot k >= 2 holds 2^(k-1) .. 2^k-1, so
// the slot is the bit length of v|1 (1..64). The result is left in out; v
// and tmp are clobbered. No loops (bounded loops are 5.3+): a binary search
// over 32, 16, 8, 4 and 2 bits, then the last bit without a branch.
func Log2Slot(prefix string, v, tmp, out bpf.Register) bpf.Instructions {
	var insns Seq
	insns.Add(bpf.Or.Imm(v, 1).WithSource(bpf.Comment(fmt.Sprintf("%s = log2 slot of %s: bit length of %s|1", out, v, v))))
	insns.Add(bpf.Mov.Imm(out, 1))
	label := func(shift int32) string { return fmt.Sprintf("%s_bits%d", prefix, shift) }
	shifts := []int32{32, 16, 8, 4, 2}
	for i, shift := range shifts {
		next := label(1)
		if i+1 < len(shifts) {
			next = label(shifts[i+1])
		}
		first := bpf.Mov.Reg(tmp, v)
		if i > 0 {
			first = first.WithSymbol(label(shift))
		}
		insns.Add(first)
		insns.Add(bpf.RSh.Imm(tmp, shift))
		insns.Add(bpf.JEq.Imm(tmp, 0, next))
		insns.Add(bpf.Mov.Reg(v, tmp))
		insns.Add(bpf.Add.Imm(out, shift))
	}
	// v is now 1, 2 or 3: its second bit is the last one to count.
	insns.Add(bpf.Mov.Reg(tmp, v).WithSymbol(label(1)))
	insns.Add(bpf.RSh.Imm(tmp, 1))
	insns.Add(bpf.Add.Reg(out, tmp))
	return insns.Instructions
}

// StoreKey stores the 32-bit register src at fp+off, building a map key.
func StoreKey(off int16, src bpf.Register, size bpf.Size) bpf.Instruction {
	return bpf.StoreMem(bpf.RFP, off, src, size)
}

// PerCPUArrayIncrement adds 1 to the u64 at the u32 key stored at fp+keyOff
// of a per-CPU array. The slot belongs to this CPU alone, so a plain
// load-add-store is safe and no atomic is needed. An array never fills, so
// nothing can be lost.
func PerCPUArrayIncrement(prefix, mapName string, keyOff int16) bpf.Instructions {
	done := prefix + "_done"
	insns := Note(MapLookup(mapName, keyOff), fmt.Sprintf("%s[key]++ (per-CPU)", mapName))
	return append(insns,
		bpf.JEq.Imm(bpf.R0, 0, done),
		bpf.LoadMem(bpf.R1, bpf.R0, 0, bpf.DWord),
		bpf.Add.Imm(bpf.R1, 1),
		bpf.StoreMem(bpf.R0, 0, bpf.R1, bpf.DWord),
		bpf.Mov.Imm(bpf.R0, 0).WithSymbol(done),
	)
}

// HashIncrement adds 1 to the u64 value of the key at fp+keyOff in a hash
// map: lookup and atomic add; else insert 1 (BPF_NOEXIST); if the insert
// fails because another CPU inserted first, add to that entry; if the map is
// full, add 1 to slot 0 of the per-CPU array lostMap. onInsert runs before
// the first insert of a key (e.g. to record the process name). valOff is a
// free 8-byte stack slot for the initial value.
func HashIncrement(prefix, mapName string, keyOff, valOff int16, lostMap string, onInsert bpf.Instructions) bpf.Instructions {
	insert, retry, lost, done := prefix+"_insert", prefix+"_retry", prefix+"_lost", prefix+"_done"
	lookup := func() bpf.Instructions { return MapLookup(mapName, keyOff) }
	atomicAdd := bpf.Instructions{
		bpf.Mov.Imm(bpf.R1, 1),
		bpf.StoreXAdd(bpf.R0, bpf.R1, bpf.DWord),
		bpf.Ja.Label(done),
	}
	var insns Seq
	first := lookup()
	first[0] = first[0].WithSource(bpf.Comment(fmt.Sprintf("%s[key]++ (insert if new, count a full map as lost)", mapName)))
	insns.Append(first)
	insns.Add(bpf.JEq.Imm(bpf.R0, 0, insert))
	insns.Append(atomicAdd)
	ins := append(bpf.Instructions{}, onInsert...)
	ins = append(ins,
		bpf.Mov.Imm(bpf.R1, 1),
		bpf.StoreMem(bpf.RFP, valOff, bpf.R1, bpf.DWord),
	)
	ins = append(ins, MapUpdate(mapName, keyOff, valOff, UpdateNoExist)...)
	ins = append(ins, bpf.JEq.Imm(bpf.R0, 0, done))
	ins[0] = ins[0].WithSymbol(insert)
	insns.Append(ins)
	again := lookup()
	again[0] = again[0].WithSymbol(retry).WithSource(bpf.Comment("insert failed: another CPU won the race, or the map is full"))
	insns.Append(again)
	insns.Add(bpf.JEq.Imm(bpf.R0, 0, lost))
	insns.Append(atomicAdd)
	insns.Append(fullMapLost(prefix, lost, done, lostMap, valOff))
	return insns.Instructions
}

// fullMapLost is a map update's tail: at label lost, slot 0 of the
// per-CPU array lostMap counts an event a full map could not take (its
// key stored at fp+valOff); done, R0 = 0, follows.
func fullMapLost(prefix, lost, done, lostMap string, valOff int16) bpf.Instructions {
	insns := bpf.Instructions{
		bpf.Mov.Imm(bpf.R1, 0).WithSymbol(lost).WithSource(bpf.Comment(lostMap + "[0]++: the map is full")),
		StoreKey(valOff, bpf.R1, bpf.Word),
	}
	insns = append(insns, PerCPUArrayIncrement(prefix+"_lost", lostMap, valOff)...)
	return append(insns, bpf.Mov.Imm(bpf.R0, 0).WithSymbol(done))
}

// SwappedHashIncrement is HashIncrement into one of two hashes of the same
// shape, maps[0] or maps[1] as the u32 in genMap's first value says (read
// in place through its address: no call), so that user space can drain one
// while the other counts: it flips the u32, waits for the programs running
// to end, and then reads and empties the other map, which no program
// writes any more. The labels are prefix_0_* and prefix_1_*.
// onInsert runs before a new key is inserted, in either map.
func SwappedHashIncrement(prefix string, maps [2]string, genMap string, keyOff, valOff int16, lostMap string, onInsert bpf.Instructions) bpf.Instructions {
	second := prefix + "_1"
	insns := bpf.Instructions{
		bpf.LoadMapValue(bpf.R1, 0, 0).WithReference(genMap).WithSource(bpf.Comment(fmt.Sprintf(
			"count in %s or %s, as %s[0] says (user space drains the other)", maps[0], maps[1], genMap))),
		bpf.LoadMem(bpf.R1, bpf.R1, 0, bpf.Word),
		bpf.JNE.Imm(bpf.R1, 0, second),
	}
	insns = append(insns, HashIncrement(prefix+"_0", maps[0], keyOff, valOff, lostMap, onInsert)...)
	insns = append(insns, bpf.Ja.Label(second+"_done"))
	one := HashIncrement(second, maps[1], keyOff, valOff, lostMap, onInsert)
	one[0] = one[0].WithSymbol(second)
	return append(insns, one...)
}

// StoreComm records the current task's name under the u32 key at fp+keyOff
// of a hash map, using 16 bytes of stack at fp+bufOff as scratch.
func StoreComm(mapName string, keyOff, bufOff int16) bpf.Instructions {
	insns := Note(stackArg(bpf.R1, bufOff), fmt.Sprintf("%s[pid] = bpf_get_current_comm()", mapName))
	insns = append(insns, bpf.Mov.Imm(bpf.R2, 16), bpf.FnGetCurrentComm.Call())
	return append(insns, MapUpdate(mapName, keyOff, bufOff, UpdateAny)...)
}

// PidInSet jumps to skip unless RegPid is traced in the hash mapName (the
// followed process tree of a -c command: see TreeOnExec). keyOff is 4
// bytes of free stack.
func PidInSet(mapName string, keyOff int16, skip string) bpf.Instructions {
	insns := bpf.Instructions{StoreKey(keyOff, RegPid, bpf.Word).WithSource(bpf.Comment(fmt.Sprintf("only pids in %s", mapName)))}
	insns = append(insns, MapLookup(mapName, keyOff)...)
	return append(insns,
		bpf.JEq.Imm(bpf.R0, 0, skip),
		bpf.LoadMem(bpf.R1, bpf.R0, 0, bpf.Word),
		bpf.JNE.Imm(bpf.R1, TreeTraced, skip).WithSource(bpf.Comment("a shell that runs the command line waits, not counted")),
	)
}

// The values of a process tree's hash (PidInSet, FollowForks, TreeOnExec):
// the command is traced from its exec on, and so is every process it
// starts; a shell that runs a command line waits, uncounted, until it
// execs (exec CMD, or a shell's last command). Its children are traced
// from their fork: busybox's ash runs many applets in a child that never
// execs.
const (
	TreeTraced  = 1
	TreeWaiting = 2
)

// FollowForks is a whole program for sched:sched_process_fork: when the
// parent is in the hash mapName, add the child, so that a -c command's
// children (dash forks even for a single command) are followed too. The
// tracepoint fires before the child first runs, so none of its events is
// missed. parent and child are the pid fields' offsets from the format file.
//
// A child that does not fit (the map is full) adds 1 to slot 0 of the
// per-CPU array lostMap, so that the tool can say so.
func FollowForks(mapName, lostMap string, parentOff, childOff int) (bpf.Instructions, error) {
	insns := Prologue()
	parent, err := LoadField(bpf.R1, "parent_pid", parentOff, 4, false)
	if err != nil {
		return nil, err
	}
	child, err := LoadField(bpf.R1, "child_pid", childOff, 4, false)
	if err != nil {
		return nil, err
	}
	insns = append(insns, parent...)
	insns = append(insns, StoreKey(-4, bpf.R1, bpf.Word))
	insns = append(insns, MapLookup(mapName, -4)...)
	insns = append(insns, bpf.JEq.Imm(bpf.R0, 0, "exit"))
	insns = append(insns, child...)
	insns = append(insns, StoreKey(-4, bpf.R1, bpf.Word))
	return append(insns, addChild(mapName, lostMap)...), nil
}

// addChild ends a fork follower: the child's pid, at fp-4, joins the hash
// mapName as traced; one that does not fit adds 1 to lostMap's slot 0.
func addChild(mapName, lostMap string) bpf.Instructions {
	insns := bpf.Instructions{
		bpf.Mov.Imm(bpf.R1, TreeTraced),
		StoreKey(-8, bpf.R1, bpf.Word),
	}
	insns = append(insns, Note(MapUpdate(mapName, -4, -8, UpdateAny), mapName+"[child] = 1: traced, whatever its parent")...)
	insns = append(insns,
		bpf.JEq.Imm(bpf.R0, 0, "exit"),
		bpf.Mov.Imm(bpf.R1, 0).WithSource(bpf.Comment("the map is full: the child is not followed")),
		StoreKey(-4, bpf.R1, bpf.Word),
	)
	insns = append(insns, PerCPUArrayIncrement("lost", lostMap, -4)...)
	return append(insns, Return("exit", 0)...)
}

// FollowForksRaw is FollowForks for the raw tracepoint sched_process_fork,
// whose arguments are the parent (the current task: fork runs in it) and
// the child, with no record: the parent's pid is the current thread's, the
// child's is read from its task_struct at taskPid (task_struct.pid's
// offset, from BTF) with read. The same pids as the record's.
func FollowForksRaw(mapName, lostMap string, taskPid int, read bpf.BuiltinFunc) (bpf.Instructions, error) {
	if taskPid <= 0 || taskPid > math.MaxInt32 {
		return nil, fmt.Errorf("task_struct.pid at %d", taskPid)
	}
	var s Seq
	s.Append(Prologue())
	s.Add(bpf.FnGetCurrentPidTgid.Call().WithSource(bpf.Comment("the parent: the current thread (its pid, as the record's parent_pid)")))
	s.Add(StoreKey(-4, bpf.R0, bpf.Word))
	s.Append(MapLookup(mapName, -4))
	s.Add(bpf.JEq.Imm(bpf.R0, 0, "exit"))
	s.Add(bpf.LoadMem(bpf.R3, RegCtx, 8, bpf.DWord).WithSource(bpf.Comment(fmt.Sprintf("the child's pid: ((struct task_struct *)ctx[1])->pid (+%d)", taskPid))))
	s.Add(bpf.Add.Imm(bpf.R3, int32(taskPid)))
	s.Add(bpf.Mov.Reg(bpf.R1, bpf.RFP))
	s.Add(bpf.Add.Imm(bpf.R1, -4))
	s.Add(bpf.Mov.Imm(bpf.R2, 4))
	s.Add(read.Call())
	s.Add(bpf.JNE.Imm(bpf.R0, 0, "exit"))
	s.Append(addChild(mapName, lostMap))
	return s.Instructions, nil
}

// TreeOnExec is a whole program for sched:sched_process_exec: a process
// of the tree in the hash mapName that execs is traced from then on (a
// waiting shell that execs the command); the command's own process, root,
// joins the map at its first exec, the gate's, with rootValue: traced,
// or waiting when that exec starts the shell that runs the command line.
// With ns, root is that pid namespace's pid, not the kernel's, which the
// map holds.
func TreeOnExec(mapName string, ns *PidNS, root, rootValue uint32) bpf.Instructions {
	insns := append(Prologue(), CurrentPid()...)
	insns = append(insns, StoreKey(-4, RegPid, bpf.Word))
	insns = append(insns, MapLookup(mapName, -4)...)
	insns = append(insns,
		bpf.JEq.Imm(bpf.R0, 0, "root"),
		bpf.Mov.Imm(bpf.R1, TreeTraced).WithSource(bpf.Comment("a process of the tree execs: traced from now on")),
		bpf.StoreMem(bpf.R0, 0, bpf.R1, bpf.Word),
		bpf.Ja.Label("exit"),
	)
	var check bpf.Instructions
	what := fmt.Sprintf("only the command: pid %d", root)
	if ns != nil {
		check, what = CurrentNsPid(*ns, -16), what+" in the namespace"
	}
	check = append(check, bpf.JNE.Imm(RegPid, int32(root), "exit").WithSource(bpf.Comment(what)))
	check[0] = check[0].WithSymbol("root")
	insns = append(insns, check...)
	insns = append(insns,
		bpf.Mov.Imm(bpf.R1, int32(rootValue)),
		StoreKey(-8, bpf.R1, bpf.Word),
	)
	insns = append(insns, Note(MapUpdate(mapName, -4, -8, UpdateAny), fmt.Sprintf("%s[kernel pid] = %d", mapName, rootValue))...)
	return append(insns, Return("exit", 0)...)
}

// ForgetExits is a whole program for sched:sched_process_exit: the exiting
// task leaves the hash mapName (a thread its tid, a process's leader its
// pid), so that a command that starts more processes over its life than
// the map holds is still followed whole. pidOff is the pid field's offset
// from the format file.
func ForgetExits(mapName string, pidOff int) (bpf.Instructions, error) {
	pid, err := LoadField(bpf.R1, "pid", pidOff, 4, false)
	if err != nil {
		return nil, err
	}
	insns := append(Prologue(), pid...)
	insns = append(insns, StoreKey(-4, bpf.R1, bpf.Word))
	insns = append(insns, Note(MapDelete(mapName, -4), "delete "+mapName+"[pid]: it exited")...)
	return append(insns, Return("exit", 0)...), nil
}

// ForgetExitsRaw is ForgetExits for the raw tracepoint sched_process_exit,
// which has no record: the exiting task is the current one (do_exit runs
// in it), so its pid is the current thread's.
func ForgetExitsRaw(mapName string) bpf.Instructions {
	var s Seq
	s.Add(bpf.FnGetCurrentPidTgid.Call().WithSource(bpf.Comment("the exiting task: the current thread (its pid, as the record's)")))
	s.Add(StoreKey(-4, bpf.R0, bpf.Word))
	s.Append(Note(MapDelete(mapName, -4), "delete "+mapName+"[pid]: it exited"))
	s.Append(Return("exit", 0))
	return s.Instructions
}

// cacheSlot finds the slot of the 16-byte key at fp+keyOff in the per-CPU
// array cacheMap, direct-mapped by (key0 ^ key0>>8) & mask: it falls
// through on the key's own slot (R0 at it), jumps to claim on a free one
// (key0 0; R0 at it, R2 the key's key0), and to miss on another key's.
// zeroMisses sends a key whose key0 is 0, which would look free, to miss.
func cacheSlot(cacheMap string, keyOff, idxOff int16, mask int32, claim, miss string, zeroMisses bool) Seq {
	var s Seq
	s.Add(bpf.LoadMem(bpf.R1, bpf.RFP, keyOff, bpf.DWord).
		WithSource(bpf.Comment(fmt.Sprintf("slot = %s[(key0 ^ key0>>8) & %d] (per-CPU)", cacheMap, mask))))
	if zeroMisses {
		s.Add(bpf.JEq.Imm(bpf.R1, 0, miss))
	}
	s.Add(bpf.Mov.Reg(bpf.R2, bpf.R1))
	s.Add(bpf.RSh.Imm(bpf.R2, 8))
	s.Add(bpf.Xor.Reg(bpf.R1, bpf.R2))
	s.Add(bpf.And.Imm(bpf.R1, mask))
	s.Add(StoreKey(idxOff, bpf.R1, bpf.Word))
	s.Append(MapLookup(cacheMap, idxOff))
	s.Add(bpf.JEq.Imm(bpf.R0, 0, miss))
	s.Add(bpf.LoadMem(bpf.R1, bpf.R0, 0, bpf.DWord).WithSource(bpf.Comment("free slot: claim it; another key's: take the hash path")))
	s.Add(bpf.LoadMem(bpf.R2, bpf.RFP, keyOff, bpf.DWord))
	s.Add(bpf.JEq.Imm(bpf.R1, 0, claim))
	s.Add(bpf.JNE.Reg(bpf.R1, bpf.R2, miss))
	s.Add(bpf.LoadMem(bpf.R1, bpf.R0, 8, bpf.DWord))
	s.Add(bpf.LoadMem(bpf.R2, bpf.RFP, keyOff+8, bpf.DWord))
	s.Add(bpf.JNE.Reg(bpf.R1, bpf.R2, miss))
	return s
}

// CacheIncrement is a fast path in front of a hash: a per-CPU array of
// slots {u64 key0; u64 key1; u64 count}, direct-mapped by the 16-byte key
// at fp+keyOff (key0 must never be 0: it marks a free slot). A slot is
// claimed by the first key that maps to it and never changes hands, so user
// space reads consistent totals: the slots' counts plus the hash's. A key
// whose slot belongs to another key jumps to miss (the hash path); a hit or
// a claim jumps to done. idxOff is 4 bytes of free stack. mask is the slot
// count minus one (a power of two).
func CacheIncrement(prefix, cacheMap string, keyOff, idxOff int16, mask int32, miss, done string) bpf.Instructions {
	claim := prefix + "_claim"
	insns := cacheSlot(cacheMap, keyOff, idxOff, mask, claim, miss, false)
	insns.Add(bpf.LoadMem(bpf.R1, bpf.R0, 16, bpf.DWord).WithSource(bpf.Comment("hit: this CPU's count++, no atomic needed")))
	insns.Add(bpf.Add.Imm(bpf.R1, 1))
	insns.Add(bpf.StoreMem(bpf.R0, 16, bpf.R1, bpf.DWord))
	insns.Add(bpf.Ja.Label(done))
	insns.Add(bpf.StoreMem(bpf.R0, 0, bpf.R2, bpf.DWord).WithSymbol(claim))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, keyOff+8, bpf.DWord))
	insns.Add(bpf.StoreMem(bpf.R0, 8, bpf.R1, bpf.DWord))
	insns.Add(bpf.Mov.Imm(bpf.R1, 1))
	insns.Add(bpf.StoreMem(bpf.R0, 16, bpf.R1, bpf.DWord))
	insns.Add(bpf.Ja.Label(done))
	return insns.Instructions
}

// Ktime puts bpf_ktime_get_ns() into dst (clobbers R0-R5).
func Ktime(dst bpf.Register) bpf.Instructions {
	insns := bpf.Instructions{bpf.FnKtimeGetNs.Call().WithSource(bpf.Comment(fmt.Sprintf("%s = bpf_ktime_get_ns()", dst)))}
	if dst != bpf.R0 {
		insns = append(insns, bpf.Mov.Reg(dst, bpf.R0))
	}
	return insns
}

// ProbeReadU64 reads the u64 at the kernel address in src into dst, through
// fp+bufOff (8 bytes of stack), with helper: bpf_probe_read_kernel (5.5+)
// where the kernel has it, bpf_probe_read before. On a fault the helper
// zeroes the buffer, so dst reads 0.
func ProbeReadU64(dst, src bpf.Register, bufOff int16, helper bpf.BuiltinFunc) bpf.Instructions {
	return ProbeRead(dst, src, bpf.DWord, bufOff, helper)
}

// ProbeRead is ProbeReadU64 of an unsigned value of size bytes (a register
// of 32-bit ARM's pt_regs: bpf.Word), zero-extended into dst.
func ProbeRead(dst, src bpf.Register, size bpf.Size, bufOff int16, helper bpf.BuiltinFunc) bpf.Instructions {
	return bpf.Instructions{
		bpf.Mov.Reg(bpf.R3, src).WithSource(bpf.Comment(fmt.Sprintf("%s = *(u%d *)%s via %v", dst, size.Sizeof()*8, src, helper))),
		bpf.Mov.Reg(bpf.R1, bpf.RFP),
		bpf.Add.Imm(bpf.R1, int32(bufOff)),
		bpf.Mov.Imm(bpf.R2, int32(size.Sizeof())),
		helper.Call(),
		bpf.LoadMem(dst, bpf.RFP, bufOff, size),
	}
}

// Nop is "goto +0": an instruction that does nothing, to carry a label or a
// comment where no real instruction is at hand (a register move would need
// its register to be initialised on every path).
func Nop() bpf.Instruction {
	return bpf.Instruction{OpCode: bpf.OpCode(bpf.JumpClass).SetJumpOp(bpf.Ja), Offset: 0}
}

// Note puts a comment on the first instruction of insns, where the
// disassembly shows it above the snippet.
func Note(insns bpf.Instructions, comment string) bpf.Instructions {
	if len(insns) > 0 {
		insns[0] = insns[0].WithSource(bpf.Comment(comment))
	}
	return insns
}

// stackArg points reg at fp+off.
func stackArg(reg bpf.Register, off int16) bpf.Instructions {
	return bpf.Instructions{bpf.Mov.Reg(reg, bpf.RFP), bpf.Add.Imm(reg, int32(off))}
}

// MapLookup calls bpf_map_lookup_elem(mapName, fp+keyOff): R0 is the
// value's address, or 0 when the key is absent.
func MapLookup(mapName string, keyOff int16) bpf.Instructions {
	insns := bpf.Instructions{bpf.LoadMapPtr(bpf.R1, 0).WithReference(mapName)}
	insns = append(insns, stackArg(bpf.R2, keyOff)...)
	return append(insns, bpf.FnMapLookupElem.Call())
}

// MapUpdate calls bpf_map_update_elem(mapName, fp+keyOff, fp+valOff,
// flags): R0 is 0 or a negative errno. flags: UpdateAny, UpdateNoExist.
func MapUpdate(mapName string, keyOff, valOff int16, flags int32) bpf.Instructions {
	insns := bpf.Instructions{bpf.LoadMapPtr(bpf.R1, 0).WithReference(mapName)}
	insns = append(insns, stackArg(bpf.R2, keyOff)...)
	insns = append(insns, stackArg(bpf.R3, valOff)...)
	return append(insns, bpf.Mov.Imm(bpf.R4, flags), bpf.FnMapUpdateElem.Call())
}

// MapDelete calls bpf_map_delete_elem(mapName, fp+keyOff).
func MapDelete(mapName string, keyOff int16) bpf.Instructions {
	insns := bpf.Instructions{bpf.LoadMapPtr(bpf.R1, 0).WithReference(mapName)}
	insns = append(insns, stackArg(bpf.R2, keyOff)...)
	return append(insns, bpf.FnMapDeleteElem.Call())
}

// CmpXchg is BPF_ATOMIC compare-and-exchange (5.12+): if *(size *)(dst +
// off) == R0, it stores src there; R0 gets the old value either way.
// cilium/ebpf v0.22 writes an atomic instruction's imm from its Constant
// before it fills the operation in, so bpf.CmpXchg.Mem alone goes to the
// kernel as an atomic add: the operation is set in Constant here.
func CmpXchg(dst, src bpf.Register, size bpf.Size, off int16) bpf.Instruction {
	ins := bpf.CmpXchg.Mem(dst, src, size, off)
	ins.Constant = int64(bpf.CmpXchg >> 8)
	return ins
}

// Seq is a program built one instruction per call, for the long ones. A
// composite literal of instructions, or an append of several, gives each
// its own stack slot, live until the slice is built, and every call in
// between carries a map of those slots: the cost grows faster than the
// program. One call per instruction is flat.
type Seq struct{ bpf.Instructions }

// Add appends one instruction.
func (s *Seq) Add(i bpf.Instruction) { s.Instructions = append(s.Instructions, i) }

// Append appends a snippet.
func (s *Seq) Append(insns bpf.Instructions) { s.Instructions = append(s.Instructions, insns...) }
