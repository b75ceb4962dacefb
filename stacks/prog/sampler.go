package prog

import (
	"fmt"

	bpf "github.com/cilium/ebpf/asm"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/proctree"
)

// sampleProg runs on every sample: filter, key (pid, kernel stack), then the
// user stack by frame pointers (bpf_get_stack) or by tail call into the
// unwinder.
func sampleProg(cfg Config) (bpf.Instructions, error) {
	var insns asm.Seq
	if cfg.Event != nil {
		insns.Append(cfg.Event.Gate)
	} else {
		insns.Append(asm.Prologue())
	}
	insns.Add(bpf.StoreMem(bpf.RFP, fpCtx, asm.RegCtx, bpf.DWord))
	if cfg.OffCPU != nil {
		in, err := switchIn(cfg)
		if err != nil {
			return nil, err
		}
		insns.Append(in)
	}
	insns.Append(asm.CurrentPid())
	if !cfg.Idle || cfg.OffCPU != nil {
		insns.Append(asm.Note(bpf.Instructions{bpf.JEq.Imm(asm.RegPid, 0, "exit")}, "not the idle task"))
	}
	if cfg.OffCPU != nil {
		live, err := alive(cfg)
		if err != nil {
			return nil, err
		}
		insns.Append(live)
	}
	if cfg.Tree != nil {
		insns.Add(asm.StoreKey(fpTgid, asm.RegPid, bpf.Word))
		insns.Append(asm.PidInSet(proctree.PidsMap, fpTgid, "exit"))
	}
	if cfg.NS != nil {
		insns.Append(asm.CurrentNsPid(*cfg.NS, fpRead))
		insns.Append(asm.Note(bpf.Instructions{bpf.JEq.Imm(asm.RegPid, 0, "exit")}, "a task outside this pid namespace: its memory maps cannot be read here"))
	}
	if cfg.Pid > 0 {
		insns.Append(asm.PidFilter(uint32(cfg.Pid), "exit"))
	}
	insns.Add(asm.StoreKey(fpTgid, asm.RegPid, bpf.Word))
	if cfg.OffCPU != nil {
		insns.Append(asm.Ktime(bpf.R1))
		insns.Add(bpf.StoreMem(bpf.RFP, fpTime, bpf.R1, bpf.DWord).WithSource(bpf.Comment("the time the thread is switched out")))
	}
	insns.Add(bpf.StoreImm(bpf.RFP, fpZero, 0, bpf.Word))
	insns.Append(asm.Note(asm.MapLookup("scratch", fpZero), "r8 = the key being built (per-CPU scratch)"))
	insns.Add(bpf.JEq.Imm(bpf.R0, 0, "exit"))
	insns.Add(bpf.Mov.Reg(bpf.R8, bpf.R0))
	if cfg.Event != nil && cfg.Event.Record > 0 {
		insns.Append(copyRecord(cfg))
	}
	// A failed read zeroes its buffer: one helper call clears the
	// previous sample's frames (bpf_probe_read* since 4.x).
	insns.Add(bpf.Mov.Reg(bpf.R1, bpf.R8).WithSource(bpf.Comment("zero the key: a read of address 0 fails and clears its buffer")))
	insns.Add(bpf.Add.Imm(bpf.R1, keyBase))
	insns.Add(bpf.Mov.Imm(bpf.R2, int32(cfg.KeySize())))
	insns.Add(bpf.Mov.Imm(bpf.R3, 0))
	insns.Add(cfg.Readers.Kernel.Call())
	insns.Add(bpf.StoreMem(bpf.R8, keyPid, asm.RegPid, bpf.Word))
	if cfg.KernelDepth > 0 {
		insns.Add(bpf.Mov.Reg(bpf.R1, asm.RegCtx).WithSource(bpf.Comment("kernel stack: bpf_get_stack(ctx, key.kernel, size, 0), zero-filled")))
		insns.Add(bpf.Mov.Reg(bpf.R2, bpf.R8))
		insns.Add(bpf.Add.Imm(bpf.R2, int32(keyBase+cfg.KernelOffset())))
		insns.Add(bpf.Mov.Imm(bpf.R3, int32(8*cfg.KernelDepth)))
		insns.Add(bpf.Mov.Imm(bpf.R4, 0))
		insns.Add(bpf.FnGetStack.Call())
		insns.Add(bpf.JSGE.Imm(bpf.R0, 0, "kernel_ok"))
		insns.Add(bpf.Mov.Imm(bpf.R1, 1))
		insns.Add(bpf.StoreMem(bpf.R8, keyKernErr, bpf.R1, bpf.Byte))
		insns.Add(asm.Nop().WithSymbol("kernel_ok"))
	}
	// A process seen for the first time is announced to user space, which
	// records its mappings (and loads their unwind tables).
	insns.Append(asm.Note(asm.MapLookup("seen", fpTgid), "first sample of this process: tell user space"))
	insns.Add(bpf.JNE.Imm(bpf.R0, 0, "known"))
	insns.Add(bpf.Mov.Imm(bpf.R1, 0))
	insns.Add(bpf.StoreMem(bpf.RFP, fpNow, bpf.R1, bpf.DWord))
	insns.Append(asm.MapUpdate("seen", fpTgid, fpNow, asm.UpdateNoExist))
	insns.Add(bpf.JNE.Imm(bpf.R0, 0, "known"))
	insns.Append(notify(EventNew))
	insns.Add(asm.Nop().WithSymbol("known"))
	insns.Append(labels(cfg))

	if cfg.Mode == UnwindFP {
		insns.Add(bpf.Mov.Reg(bpf.R1, asm.RegCtx).WithSource(bpf.Comment("user stack by frame pointers: bpf_get_stack(ctx, key.user, size, BPF_F_USER_STACK)")))
		insns.Add(bpf.Mov.Reg(bpf.R2, bpf.R8))
		insns.Add(bpf.Add.Imm(bpf.R2, int32(cfg.keyUser())))
		insns.Add(bpf.Mov.Imm(bpf.R3, int32(8*cfg.UserDepth)))
		insns.Add(bpf.Mov.Imm(bpf.R4, 1<<8))
		insns.Add(bpf.FnGetStack.Call())
		insns.Add(bpf.Mov.Imm(bpf.R1, StopFP))
		insns.Add(bpf.JSGE.Imm(bpf.R0, 0, "fp_ok"))
		insns.Add(bpf.Mov.Imm(bpf.R1, StopRead))
		insns.Add(bpf.StoreMem(bpf.R8, keyStop, bpf.R1, bpf.Byte).WithSymbol("fp_ok"))
		insns.Add(bpf.Ja.Label("count"))
		insns.Append(finish(cfg, "count", bpf.R8, true))
		insns.Append(asm.Return("exit", 0))
		return insns.Instructions, nil
	}

	// The user registers: the sample's own if it interrupted user mode,
	// else the task's saved ones (bpf_task_pt_regs, 5.15+). A thread
	// switched out is always in the kernel.
	// An event's context is the probe's registers or no registers at all
	// (a tracepoint's record).
	ctxRegs := cfg.OffCPU == nil && (cfg.Event == nil || cfg.Event.Regs)
	if cfg.Event != nil && !ctxRegs && !cfg.TaskRegs && (cfg.Arch != X86_64 || cfg.TaskStack == 0) {
		return nil, ErrNoUserRegs
	}
	if ctxRegs && cfg.Arch == ARM64 {
		insns.Add(bpf.LoadMem(bpf.R1, asm.RegCtx, armPstate, bpf.DWord).WithSource(bpf.Comment("user mode (pstate: EL0, AArch64): the sample's registers are the user's")))
		insns.Add(bpf.And.Imm(bpf.R1, armModeMask))
		insns.Add(bpf.JNE.Imm(bpf.R1, 0, "kernel_mode"))
		insns.Append(loadRegsARM64(asm.RegCtx, 0))
		insns.Add(bpf.Ja.Label("have_regs"))
	} else if ctxRegs && cfg.Arch == RISCV64 {
		insns.Add(bpf.LoadMem(bpf.R1, asm.RegCtx, rvPC, bpf.DWord).WithSource(bpf.Comment("user mode (pc in the lower half: the context has no status): the sample's registers are the user's")))
		insns.Add(bpf.RSh.Imm(bpf.R1, 63))
		insns.Add(bpf.JNE.Imm(bpf.R1, 0, "kernel_mode"))
		insns.Append(loadRegsRISCV64(asm.RegCtx))
		insns.Add(bpf.Ja.Label("have_regs"))
	} else if ctxRegs {
		insns.Add(bpf.LoadMem(bpf.R1, asm.RegCtx, regs.CS, bpf.DWord).WithSource(bpf.Comment("user mode (cs & 3 == 3): the sample's registers are the user's")))
		insns.Add(bpf.And.Imm(bpf.R1, 3))
		insns.Add(bpf.JNE.Imm(bpf.R1, 3, "kernel_mode"))
		insns.Append(loadRegs(asm.RegCtx))
		insns.Add(bpf.Ja.Label("have_regs"))
	}
	if cfg.TaskRegs && cfg.Arch == ARM64 {
		insns.Add(bpf.FnGetCurrentTaskBtf.Call().WithSymbol("kernel_mode").WithSource(bpf.Comment("kernel mode: copy x29 to pstate of bpf_task_pt_regs(current)")))
		insns.Add(bpf.Mov.Reg(bpf.R1, bpf.R0))
		insns.Add(bpf.FnTaskPtRegs.Call())
		insns.Add(bpf.Mov.Reg(bpf.R3, bpf.R0))
		insns.Add(bpf.Add.Imm(bpf.R3, armFP))
		insns.Append(copyRegs(cfg))
		insns.Add(bpf.Mov.Reg(bpf.R7, bpf.R8))
		insns.Add(bpf.Add.Imm(bpf.R7, stateRegs))
		insns.Add(bpf.LoadMem(bpf.R1, bpf.R7, armPstate-armFP, bpf.DWord).WithSource(bpf.Comment("a 32-bit task's registers are not unwound")))
		insns.Add(bpf.And.Imm(bpf.R1, armModeMask))
		insns.Add(bpf.JNE.Imm(bpf.R1, 0, "no_regs"))
		insns.Append(loadRegsARM64(bpf.R7, armFP))
	} else if cfg.TaskRegs {
		what, load := "kernel mode: copy bpf_task_pt_regs(current)", loadRegs(bpf.R7)
		if cfg.Arch == RISCV64 {
			what, load = "kernel mode: copy pc to s0 of bpf_task_pt_regs(current)", loadRegsRISCV64(bpf.R7)
		}
		insns.Add(bpf.FnGetCurrentTaskBtf.Call().WithSymbol("kernel_mode").WithSource(bpf.Comment(what)))
		insns.Add(bpf.Mov.Reg(bpf.R1, bpf.R0))
		insns.Add(bpf.FnTaskPtRegs.Call())
		insns.Add(bpf.Mov.Reg(bpf.R3, bpf.R0))
		insns.Append(copyRegs(cfg))
		insns.Add(bpf.Mov.Reg(bpf.R7, bpf.R8))
		insns.Add(bpf.Add.Imm(bpf.R7, stateRegs))
		insns.Append(load)
	} else if cfg.Arch != X86_64 {
		// Before 5.15 arm64's pt_regs has no fixed size to find it by.
		insns.Add(bpf.Ja.Label("no_regs").WithSymbol("kernel_mode").WithSource(bpf.Comment("kernel mode: no way to the user registers before 5.15 here")))
	} else if cfg.TaskStack > 0 {
		// Before 5.15: the user registers are the last thing on the task's
		// kernel stack (task_pt_regs: stack + THREAD_SIZE - sizeof(pt_regs),
		// less 16 bytes of padding on FRED kernels). The user code segment
		// checks each guess.
		read := currentU64(cfg, cfg.TaskStack, fpRead, "kernel mode, before 5.15: the pt_regs at the top of current->stack")
		read[0] = read[0].WithSymbol("kernel_mode")
		insns.Append(read)
		insns.Add(bpf.JNE.Imm(bpf.R0, 0, "no_regs"))
		insns.Add(bpf.LoadMem(bpf.R3, bpf.RFP, fpRead, bpf.DWord))
		insns.Add(bpf.JEq.Imm(bpf.R3, 0, "no_regs"))
		insns.Add(bpf.Add.Imm(bpf.R3, threadSize-ptRegsLen))
		insns.Add(bpf.StoreMem(bpf.RFP, fpRead, bpf.R3, bpf.DWord))
		insns.Append(copyRegs(cfg))
		insns.Add(bpf.Mov.Reg(bpf.R7, bpf.R8))
		insns.Add(bpf.Add.Imm(bpf.R7, stateRegs))
		insns.Add(bpf.LoadMem(bpf.R1, bpf.R7, regs.CS, bpf.DWord))
		insns.Add(bpf.JEq.Imm(bpf.R1, userCS, "task_regs"))
		// FRED kernels (6.9+) keep 16 bytes above the registers
		// (TOP_OF_KERNEL_STACK_PADDING): the tests force this path there.
		insns.Add(bpf.LoadMem(bpf.R3, bpf.RFP, fpRead, bpf.DWord).WithSource(bpf.Comment("not user registers: try 16 bytes lower (FRED's padding)")))
		insns.Add(bpf.Sub.Imm(bpf.R3, 16))
		insns.Append(copyRegs(cfg))
		insns.Add(bpf.LoadMem(bpf.R1, bpf.R7, regs.CS, bpf.DWord))
		insns.Add(bpf.JNE.Imm(bpf.R1, userCS, "no_regs"))
		insns.Add(asm.Nop().WithSymbol("task_regs"))
		insns.Append(loadRegs(bpf.R7))
	} else {
		insns.Add(bpf.Ja.Label("no_regs").WithSymbol("kernel_mode").WithSource(bpf.Comment("kernel mode: no way to the user registers")))
	}
	insns.Add(bpf.JEq.Imm(bpf.R1, 0, "no_regs").WithSymbol("have_regs"))
	insns.Add(bpf.StoreMem(bpf.R8, statePC, bpf.R1, bpf.DWord))
	insns.Add(bpf.StoreMem(bpf.R8, stateSP, bpf.R2, bpf.DWord))
	insns.Add(bpf.StoreMem(bpf.R8, stateBP, bpf.R3, bpf.DWord))
	insns.Add(bpf.Mov.Imm(bpf.R1, 0))
	insns.Add(bpf.StoreMem(bpf.R8, stateN, bpf.R1, bpf.DWord))
	insns.Add(bpf.StoreMem(bpf.R8, stateRA, bpf.R1, bpf.Word))
	if cfg.Mode != UnwindFP {
		insns.Add(bpf.StoreMem(bpf.R8, stateMapLen, bpf.R1, bpf.DWord).WithSource(bpf.Comment("no mapping cached yet")))
	}
	if cfg.OffCPU != nil {
		insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpTime, bpf.DWord).WithSource(bpf.Comment("the time switched out, for the unwinder's stash")))
		insns.Add(bpf.StoreMem(bpf.R8, stashTime, bpf.R1, bpf.DWord))
		sleep, err := asleep(cfg)
		if err != nil {
			return nil, err
		}
		insns.Append(sleep)
	}
	insns.Add(bpf.Mov.Reg(bpf.R1, asm.RegCtx).WithSource(bpf.Comment("walk the user stack: tail call the unwinder")))
	insns.Add(bpf.LoadMapPtr(bpf.R2, 0).WithReference("progs"))
	insns.Add(bpf.Mov.Imm(bpf.R3, 0))
	insns.Add(bpf.FnTailCall.Call())
	insns.Add(bpf.Mov.Imm(bpf.R1, StopTruncated))
	insns.Add(bpf.Ja.Label("stop"))
	insns.Add(bpf.Mov.Imm(bpf.R1, StopNoRegs).WithSymbol("no_regs"))
	insns.Add(bpf.StoreMem(bpf.R8, keyStop, bpf.R1, bpf.Byte).WithSymbol("stop"))
	insns.Append(finish(cfg, "count", bpf.R8, true))
	insns.Append(asm.Return("exit", 0))
	return insns.Instructions, nil
}

// copyRecord copies the record the gate left on the stack (Event.RecordAt)
// into the scratch value (R8), after the key: 8 bytes at a time, then 4,
// 2 and 1 (the verifier refuses a read of stack bytes never written).
func copyRecord(cfg Config) bpf.Instructions {
	ev := cfg.Event
	var insns asm.Seq
	dst := int16(keyBase + cfg.RecordOffset())
	for off := 0; off < ev.Record; {
		n := 8
		for ev.Record-off < n {
			n /= 2
		}
		size, _ := asm.MemSize(n)
		load := bpf.LoadMem(bpf.R1, bpf.RFP, ev.RecordAt+int16(off), size)
		if off == 0 {
			load = load.WithSource(bpf.Comment(fmt.Sprintf("the event's record, %d bytes at fp%d, after the key", ev.Record, ev.RecordAt)))
		}
		insns.Add(load)
		insns.Add(bpf.StoreMem(bpf.R8, dst+int16(off), bpf.R1, size))
		off += n
	}
	return insns.Instructions
}

// copyRegs copies the pt_regs at the kernel address in R3 into the
// scratch value's state (R8); a failed read goes to no_regs.
func copyRegs(cfg Config) bpf.Instructions {
	var insns asm.Seq
	insns.Add(bpf.Mov.Reg(bpf.R1, bpf.R8))
	insns.Add(bpf.Add.Imm(bpf.R1, stateRegs))
	size := int32(ptRegsLen)
	switch cfg.Arch {
	case ARM64:
		size = armRegsLen
	case RISCV64:
		size = rvRegsLen
	}
	insns.Add(bpf.Mov.Imm(bpf.R2, size))
	insns.Add(cfg.Readers.Kernel.Call())
	insns.Add(bpf.JNE.Imm(bpf.R0, 0, "no_regs"))
	return insns.Instructions
}

// loadRegs loads ip, sp and bp of the pt_regs at from into R1, R2, R3 (the
// context and a copy take separate loads: the verifier rewrites context
// accesses and refuses an instruction that reads both).
func loadRegs(from bpf.Register) bpf.Instructions {
	return bpf.Instructions{
		bpf.LoadMem(bpf.R1, from, regs.IP, bpf.DWord),
		bpf.LoadMem(bpf.R2, from, regs.SP, bpf.DWord),
		bpf.LoadMem(bpf.R3, from, regs.FP, bpf.DWord),
	}
}

// notify sends {tgid, kind, 0} to user space (the context at fpCtx, the
// tgid at fpTgid). Clobbers R0-R5.
func notify(kind int32) bpf.Instructions {
	var insns asm.Seq
	insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpTgid, bpf.Word).WithSource(bpf.Comment(fmt.Sprintf("bpf_perf_event_output(ctx, events, BPF_F_CURRENT_CPU, {tgid, %d, 0}, 16)", kind))))
	insns.Add(bpf.StoreMem(bpf.RFP, fpEvent, bpf.R1, bpf.Word))
	insns.Add(bpf.StoreImm(bpf.RFP, fpEvent+4, int64(kind), bpf.Word))
	insns.Add(bpf.Mov.Imm(bpf.R1, 0))
	insns.Add(bpf.StoreMem(bpf.RFP, fpEvent+8, bpf.R1, bpf.DWord))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpCtx, bpf.DWord))
	insns.Append(output("events", bpf.RFP, fpEvent, 16))
	return insns.Instructions
}

// output sends size bytes at from+off to user space through the perf
// event array ring, the context in R1:
// bpf_perf_event_output(ctx, ring, BPF_F_CURRENT_CPU, from+off, size).
func output(ring string, from bpf.Register, off, size int32) bpf.Instructions {
	return outputR5(ring, from, off, bpf.Mov.Imm(bpf.R5, size))
}

// outputSized is output of size+reg bytes: a record as long as what it
// holds (reg bounded by the verifier's knowledge of it).
func outputSized(ring string, from bpf.Register, off int32, reg bpf.Register, size int32) bpf.Instructions {
	return outputR5(ring, from, off, bpf.Mov.Reg(bpf.R5, reg), bpf.Add.Imm(bpf.R5, size))
}

// outputR5 is the output call, its size set in R5 by setSize.
func outputR5(ring string, from bpf.Register, off int32, setSize ...bpf.Instruction) bpf.Instructions {
	insns := bpf.Instructions{
		bpf.LoadMapPtr(bpf.R2, 0).WithReference(ring),
		bpf.LoadImm(bpf.R3, 0xffffffff, bpf.DWord),
		bpf.Mov.Reg(bpf.R4, from),
		bpf.Add.Imm(bpf.R4, off),
	}
	insns = append(insns, setSize...)
	return append(insns, bpf.FnPerfEventOutput.Call())
}

// count adds one to counts[key], the key at keyBase of the scratch value in
// scratch (a callee-saved register); a full map counts in lost.
func count(cfg Config, label string, scratch bpf.Register) bpf.Instructions {
	return add(cfg, label, scratch, keyBase, bpf.Mov.Imm(bpf.R1, 1), "counts[key]++")
}

// add adds R1, as amount sets it (from a constant or a callee-saved
// register), to counts[key], the key at keyOff of key, in the hash of the
// two that gen[0] names (user space drains the other: see CountsSwap); a
// full map counts in lost. A key of ShortUserFrames user frames or fewer
// counts in the short hashes (ShortCounts), its first ShortKeySize bytes
// the key: most stacks are that short, and a hash's cost is its key's
// size (each lookup hashes and compares the whole key). what says it in
// the comment.
func add(cfg Config, label string, key bpf.Register, keyOff int32, amount bpf.Instruction, what string) bpf.Instructions {
	var insns asm.Seq
	insns.Add(bpf.LoadMapValue(bpf.R1, 0, 0).WithReference(GenMap).WithSymbol(label).WithSource(bpf.Comment(what + ": in counts or " + CountsSwap + ", as " + GenMap + "[0] says")))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.R1, 0, bpf.Word))
	if cfg.ShortKeySize() > 0 {
		insns.Add(bpf.LoadMem(bpf.R2, key, int16(keyOff)+int16(cfg.ShortKeySize()), bpf.DWord).WithSource(bpf.Comment(fmt.Sprintf("no user frame past the first %d: in %s or %s", ShortUserFrames, ShortCounts, ShortSwap))))
		insns.Add(bpf.JNE.Imm(bpf.R2, 0, label+"_deep"))
		insns.Add(bpf.JNE.Imm(bpf.R1, 0, label+"_short1"))
		insns.Append(addTo(label+"_short0", ShortCounts, key, keyOff, amount))
		insns.Add(bpf.Ja.Label(label + "_done"))
		insns.Append(addTo(label+"_short1", ShortSwap, key, keyOff, amount))
		insns.Add(bpf.Ja.Label(label + "_done"))
		insns.Add(bpf.JNE.Imm(bpf.R1, 0, label+"_1").WithSymbol(label + "_deep"))
	} else {
		insns.Add(bpf.JNE.Imm(bpf.R1, 0, label+"_1"))
	}
	insns.Append(addTo(label+"_0", "counts", key, keyOff, amount))
	insns.Add(bpf.Ja.Label(label + "_done"))
	insns.Append(addTo(label+"_1", CountsSwap, key, keyOff, amount))
	insns.Add(asm.Nop().WithSymbol(label + "_done"))
	return insns.Instructions
}

// addTo is add's count in one hash, m: insert if new, a full map counts in
// lost.
func addTo(p, m string, key bpf.Register, keyOff int32, amount bpf.Instruction) bpf.Instructions {
	var insns asm.Seq
	insns.Add(bpf.LoadMapPtr(bpf.R1, 0).WithReference(m).WithSymbol(p).WithSource(bpf.Comment(m + "[key] (insert if new, a full map counts in lost)")))
	insns.Add(bpf.Mov.Reg(bpf.R2, key))
	insns.Add(bpf.Add.Imm(bpf.R2, keyOff))
	insns.Add(bpf.FnMapLookupElem.Call())
	insns.Add(bpf.JEq.Imm(bpf.R0, 0, p+"_insert"))
	insns.Add(amount.WithSymbol(p + "_add"))
	insns.Add(bpf.StoreXAdd(bpf.R0, bpf.R1, bpf.DWord))
	insns.Add(bpf.Ja.Label(p + "_done"))
	insns.Add(amount.WithSymbol(p + "_insert"))
	insns.Add(bpf.StoreMem(bpf.RFP, fpOne, bpf.R1, bpf.DWord))
	insns.Add(bpf.LoadMapPtr(bpf.R1, 0).WithReference(m))
	insns.Add(bpf.Mov.Reg(bpf.R2, key))
	insns.Add(bpf.Add.Imm(bpf.R2, keyOff))
	insns.Add(bpf.Mov.Reg(bpf.R3, bpf.RFP))
	insns.Add(bpf.Add.Imm(bpf.R3, fpOne))
	insns.Add(bpf.Mov.Imm(bpf.R4, asm.UpdateNoExist))
	insns.Add(bpf.FnMapUpdateElem.Call())
	insns.Add(bpf.JEq.Imm(bpf.R0, 0, p+"_done"))
	insns.Add(bpf.LoadMapPtr(bpf.R1, 0).WithReference(m).WithSource(bpf.Comment("another CPU inserted it first, or the map is full")))
	insns.Add(bpf.Mov.Reg(bpf.R2, key))
	insns.Add(bpf.Add.Imm(bpf.R2, keyOff))
	insns.Add(bpf.FnMapLookupElem.Call())
	insns.Add(bpf.JNE.Imm(bpf.R0, 0, p+"_add"))
	insns.Add(bpf.StoreImm(bpf.RFP, fpZero, 0, bpf.Word))
	insns.Append(asm.PerCPUArrayIncrement(p+"_lost", "lost", fpZero))
	insns.Add(asm.Nop().WithSymbol(p + "_done"))
	return insns.Instructions
}
