package prog

import (
	"fmt"
	"regexp"
	"strconv"
	"sync"

	bpf "github.com/cilium/ebpf/asm"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/tracefs"
)

// OffCPU makes the programs count where threads wait instead of where
// they run: the entry program runs at sched:sched_switch. For the thread
// switched out (current), it builds the same key as a sample (its kernel
// stack, its user stack unwound by the same unwinder) and stashes it with
// the time in blocked, by thread id. For the thread switched in, it takes
// its stash back and adds the time it was off the CPU to counts[key]:
// the counts are nanoseconds, not samples.
type OffCPU struct {
	// The sched_switch fields, from its format file: next_pid's offset,
	// and prev_state's offset and size.
	NextPid, PrevState, PrevStateSize int
	// Dead is the prev_state bits of a thread switched out for the last
	// time (EXIT_DEAD, EXIT_ZOMBIE: "X" and "Z" in the format's print
	// fmt): its stash would never be taken back. 0: every thread stashes.
	Dead int32
	// Asleep is every prev_state flag the print fmt names: a thread
	// switched out with none of them set was preempted (runnable, "R"),
	// else it goes to sleep. Only a sleep's stack is deferred to user
	// space when it meets an unread mapping: a process starting on a
	// busy CPU is preempted hundreds of times, each copy 8 KiB, and
	// those would fill the ring before its first sleep. 0: all are.
	Asleep int32
	// MinBlock and MaxBlock bound the times counted, in nanoseconds (as
	// offcputime's -m and -M); MaxBlock 0 is no bound.
	MinBlock, MaxBlock uint64
}

const (
	// maxBlocked is the most threads off the CPU at once that are
	// tracked; past it, a switch out is counted in lost.
	maxBlocked = 16384
	// stashTime is where the scratch value keeps the time the thread
	// was switched out: just before the key, so that the stash, {time,
	// key}, is one copy. It is the pt_regs copy's last word (ss), read
	// by nothing once the walk has begun.
	stashTime = keyBase - 8
	fpTid     = -204 // u32: a thread id, the key of blocked
	fpTime    = -216 // u64: the time the thread was switched out
	fpWaited  = -240 // 24 bytes: {u32 tgid; u32 kind; u64 time; u64 waited} sent to user space
)

// EventWaited is the wait of a thread whose stack was deferred
// (StopDeferred): {u32 tgid; u32 kind; u64 switch-out time (the record's
// WaitTime); u64 nanoseconds waited}, sent whatever the bounds (user
// space applies them). If it cannot be sent (a full ring), the wait is
// counted in the kernel under the stack as far as it was walked, ending
// [unwind error: no table].
const EventWaited = 6

// switchIn takes back the stash of the thread switched in (next_pid) and
// adds the time since it was switched out to counts[its key], if it is
// within the bounds; the stash is deleted either way. R6 is the context.
func switchIn(cfg Config) (bpf.Instructions, error) {
	oc := cfg.OffCPU
	var insns asm.Seq
	next, err := asm.LoadField(bpf.R1, "next_pid", oc.NextPid, 4, true)
	if err != nil {
		return nil, err
	}
	insns.Append(next)
	insns.Add(bpf.JEq.Imm(bpf.R1, 0, "in_done"))
	insns.Add(bpf.StoreMem(bpf.RFP, fpTid, bpf.R1, bpf.Word))
	insns.Append(asm.Note(asm.MapLookup("blocked", fpTid), "the thread switched in: r8 = its stash {time, key}, if it was switched out while traced"))
	insns.Add(bpf.JEq.Imm(bpf.R0, 0, "in_done"))
	insns.Add(bpf.Mov.Reg(bpf.R8, bpf.R0))
	insns.Append(asm.Ktime(bpf.R9))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.R8, 0, bpf.DWord).WithSource(bpf.Comment("r9 = the time it was off the CPU")))
	insns.Add(bpf.Sub.Reg(bpf.R9, bpf.R1))
	if cfg.Mode != UnwindFP {
		insns.Add(bpf.LoadMem(bpf.R1, bpf.R8, 8+keyStop-keyBase, bpf.Byte).WithSource(bpf.Comment("a stack deferred to user space: send the wait there")))
		insns.Add(bpf.JNE.Imm(bpf.R1, StopDeferred, "in_bounds"))
		insns.Add(bpf.LoadMem(bpf.R1, bpf.R8, 8+keyPid-keyBase, bpf.Word))
		insns.Add(bpf.StoreMem(bpf.RFP, fpWaited, bpf.R1, bpf.Word))
		insns.Add(bpf.StoreImm(bpf.RFP, fpWaited+4, EventWaited, bpf.Word))
		insns.Add(bpf.LoadMem(bpf.R1, bpf.R8, 0, bpf.DWord))
		insns.Add(bpf.StoreMem(bpf.RFP, fpWaited+8, bpf.R1, bpf.DWord))
		insns.Add(bpf.StoreMem(bpf.RFP, fpWaited+16, bpf.R9, bpf.DWord))
		insns.Add(bpf.Mov.Reg(bpf.R1, asm.RegCtx).WithSource(bpf.Comment("bpf_perf_event_output(ctx, events, BPF_F_CURRENT_CPU, {tgid, 6, time, waited}, 24)")))
		insns.Append(output("events", bpf.RFP, fpWaited, 24))
		insns.Add(bpf.JEq.Imm(bpf.R0, 0, "in_forget"))
		// Not sent (the ring is full): the wait is counted here, with the
		// stack as far as the kernel walked it, rather than lost.
		insns.Add(bpf.Mov.Imm(bpf.R1, StopNoTable).WithSource(bpf.Comment("the wait could not be sent: count it here, the stack cut where it was deferred")))
		insns.Add(bpf.StoreMem(bpf.R8, 8+keyStop-keyBase, bpf.R1, bpf.Byte))
		insns.Add(asm.Nop().WithSymbol("in_bounds"))
	}
	if oc.MinBlock > 0 {
		insns.Add(bpf.LoadImm(bpf.R1, int64(oc.MinBlock), bpf.DWord).WithSource(bpf.Comment("shorter than --min-block: not counted")))
		insns.Add(bpf.JGT.Reg(bpf.R1, bpf.R9, "in_forget")) // no JLT: 4.14+
	}
	if oc.MaxBlock > 0 {
		insns.Add(bpf.LoadImm(bpf.R1, int64(oc.MaxBlock), bpf.DWord).WithSource(bpf.Comment("longer than --max-block: not counted")))
		insns.Add(bpf.JGT.Reg(bpf.R9, bpf.R1, "in_forget"))
	}
	insns.Append(add(cfg, "in_count", bpf.R8, 8, bpf.Mov.Reg(bpf.R1, bpf.R9), "counts[key] += r9"))
	insns.Add(asm.Nop().WithSymbol("in_forget"))
	insns.Append(asm.Note(asm.MapDelete("blocked", fpTid), "the stash is used up, counted or not"))
	insns.Add(asm.Nop().WithSymbol("in_done"))
	return insns.Instructions, nil
}

// alive skips the switch out of a thread that will never run again (it
// is exiting): its stash would stay until its thread id came again.
func alive(cfg Config) (bpf.Instructions, error) {
	oc := cfg.OffCPU
	if oc.Dead == 0 {
		return nil, nil
	}
	state, err := asm.LoadField(bpf.R1, "prev_state", oc.PrevState, oc.PrevStateSize, false)
	if err != nil {
		return nil, err
	}
	return append(state,
		bpf.And.Imm(bpf.R1, oc.Dead).WithSource(bpf.Comment(fmt.Sprintf("prev_state & %#x: switched out for the last time (exiting)", oc.Dead))),
		bpf.JNE.Imm(bpf.R1, 0, "exit"),
	), nil
}

// stash keeps the key built in scratch (a callee-saved register), with the
// time at stashTime, as blocked[current thread]; a full map counts in lost.
func stash(label string, scratch bpf.Register) bpf.Instructions {
	var insns asm.Seq
	insns.Add(bpf.FnGetCurrentPidTgid.Call().WithSymbol(label).WithSource(bpf.Comment("blocked[tid] = {time, key}: counted when the thread runs again")))
	insns.Add(bpf.StoreMem(bpf.RFP, fpTid, bpf.R0, bpf.Word))
	insns.Add(bpf.LoadMapPtr(bpf.R1, 0).WithReference("blocked"))
	insns.Add(bpf.Mov.Reg(bpf.R2, bpf.RFP))
	insns.Add(bpf.Add.Imm(bpf.R2, fpTid))
	insns.Add(bpf.Mov.Reg(bpf.R3, scratch))
	insns.Add(bpf.Add.Imm(bpf.R3, stashTime))
	insns.Add(bpf.Mov.Imm(bpf.R4, 0))
	insns.Add(bpf.FnMapUpdateElem.Call())
	insns.Add(bpf.JEq.Imm(bpf.R0, 0, label+"_done"))
	insns.Add(bpf.StoreImm(bpf.RFP, fpZero, 0, bpf.Word))
	insns.Append(asm.PerCPUArrayIncrement(label+"_lost", "lost", fpZero))
	insns.Add(asm.Nop().WithSymbol(label + "_done"))
	return insns.Instructions
}

// finish ends a walk: the key in scratch is counted (a sample), or
// stashed with its time (off-CPU; the entry program, which has the time
// on its stack, copies it first).
func finish(cfg Config, label string, scratch bpf.Register, entry bool) bpf.Instructions {
	if cfg.Event != nil && cfg.Event.Emit {
		// An event printed: its key and record to user space.
		insns := bpf.Instructions{bpf.LoadMem(bpf.R1, bpf.RFP, fpCtx, bpf.DWord).WithSymbol(label).WithSource(bpf.Comment(fmt.Sprintf("bpf_perf_event_output(ctx, %s, BPF_F_CURRENT_CPU, key, %d): the event, its stacks and record", RecordsMap, cfg.emitSize())))}
		return append(insns, output(RecordsMap, scratch, keyBase, int32(cfg.emitSize()))...)
	}
	if cfg.OffCPU == nil {
		return count(cfg, label, scratch)
	}
	var insns asm.Seq
	if entry {
		insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpTime, bpf.DWord).WithSymbol(label).WithSource(bpf.Comment("the time it was switched out")))
		insns.Add(bpf.StoreMem(scratch, stashTime, bpf.R1, bpf.DWord))
		label += "_stash"
	}
	insns.Append(stash(label, scratch))
	return insns.Instructions
}

// stateFlag matches a prev_state flag of __print_flags in sched_switch's
// print fmt: { 0x00000010, "X" }.
var stateFlag = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\{\s*(0x[0-9a-fA-F]+|\d+)\s*,\s*"([A-Za-z])"\s*\}`) })

// asleep stores in the walk's state whether the thread switched out goes
// to sleep (prev_state has a flag of Asleep) or was preempted.
func asleep(cfg Config) (bpf.Instructions, error) {
	oc := cfg.OffCPU
	if oc.Asleep == 0 {
		return bpf.Instructions{bpf.StoreImm(bpf.R8, stateWait, 1, bpf.Word)}, nil
	}
	state, err := asm.LoadField(bpf.R1, "prev_state", oc.PrevState, oc.PrevStateSize, false)
	if err != nil {
		return nil, err
	}
	return append(state,
		bpf.And.Imm(bpf.R1, oc.Asleep).WithSource(bpf.Comment(fmt.Sprintf("going to sleep: prev_state & %#x", oc.Asleep))),
		bpf.StoreMem(bpf.R8, stateWait, bpf.R1, bpf.Word),
	), nil
}

// NewOffCPU places sched_switch's fields from its format file (f) and
// finds the prev_state bits of an exiting thread in its print fmt.
func NewOffCPU(f *tracefs.Format, minBlock, maxBlock uint64) (*OffCPU, error) {
	next, err := f.MustField("next_pid")
	if err != nil {
		return nil, err
	}
	state, err := f.MustField("prev_state")
	if err != nil {
		return nil, err
	}
	if next.Size != 4 {
		return nil, fmt.Errorf("sched_switch: next_pid has %d bytes, not 4", next.Size)
	}
	oc := &OffCPU{NextPid: next.Offset, PrevState: state.Offset, PrevStateSize: state.Size, MinBlock: minBlock, MaxBlock: maxBlock}
	for _, m := range stateFlag().FindAllStringSubmatch(f.PrintFmt, -1) {
		v, err := strconv.ParseUint(m[1], 0, 31)
		if err != nil {
			continue
		}
		oc.Asleep |= int32(v)
		if m[2] == "X" || m[2] == "Z" {
			oc.Dead |= int32(v)
		}
	}
	return oc, nil
}
