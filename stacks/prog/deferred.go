package prog

import (
	"fmt"

	bpf "github.com/cilium/ebpf/asm"

	"github.com/tracekit/tracekit/asm"
)

// deferred ends a walk that met an address in no mapping it knows (a
// process, or a library, not read yet: the first milliseconds of a
// process): instead of counting a stack cut short, it sends the walk's
// state, the key so far and a copy of the top of the user stack to user
// space (EventStack), which unwinds the rest with the same rules once the
// file's table is read. The copy starts Arch.CopyBelow bytes below the
// stack pointer and ends where the process's stack started
// (mm->start_stack) if that is within StackCopy, else it is StackCopy
// bytes, or 2048, or 512, the first that can be read; the record ends with
// the copy (a main thread's shallow stack: a few hundred bytes, not 8 KiB,
// so the ring holds tens of records, not a dozen). If the record cannot be
// sent (the ring is full), the stack is counted as it is, with no table.
func deferred(cfg Config) bpf.Instructions {
	var insns asm.Seq
	insns.Add(bpf.LoadMem(bpf.R1, bpf.R9, keyPid, bpf.Word).WithSymbol("deferred").WithSource(bpf.Comment("an address in no known mapping: defer the sample to user space with a copy of the stack")))
	if cfg.OffCPU != nil {
		insns.Add(bpf.LoadMem(bpf.R2, bpf.R9, stateWait, bpf.Word).WithSource(bpf.Comment("off-CPU: only a thread going to sleep, not one preempted")))
		insns.Add(bpf.JEq.Imm(bpf.R2, 0, "no_table"))
		insns.Add(bpf.LoadMem(bpf.R2, bpf.R9, stashTime, bpf.DWord).WithSource(bpf.Comment("the switch-out time goes with the record: it names the wait")))
		insns.Add(bpf.StoreMem(bpf.R9, int16(cfg.waitTimeOff()), bpf.R2, bpf.DWord))
	}
	insns.Add(bpf.StoreMem(bpf.R9, deferHeader, bpf.R1, bpf.Word))
	insns.Add(bpf.StoreImm(bpf.R9, deferHeader+4, EventStack, bpf.Word))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpLookup, bpf.DWord))
	insns.Add(bpf.StoreMem(bpf.R9, deferHeader+8, bpf.R1, bpf.DWord))
	for i, off := range []int16{statePC, stateSP, stateBP} {
		insns.Add(bpf.LoadMem(bpf.R1, bpf.R9, off, bpf.DWord))
		insns.Add(bpf.StoreMem(bpf.R9, deferHeader+16+8*int16(i), bpf.R1, bpf.DWord))
	}
	if cfg.Arch.linkRegister() {
		insns.Add(bpf.LoadMem(bpf.R1, bpf.R9, stateLR, bpf.DWord))
		insns.Add(bpf.StoreMem(bpf.R9, deferHeader+40, bpf.R1, bpf.DWord))
	}
	insns.Add(bpf.Mov.Imm(bpf.R6, StackCopy))
	if ss := cfg.StartStack; ss != nil {
		insns.Append(currentU64(cfg, ss.MM, fpRead, fmt.Sprintf("the copy's size: up to current->mm (+%d)->start_stack (+%d), if within it", ss.MM, ss.StartStack)))
		insns.Add(bpf.JNE.Imm(bpf.R0, 0, "deferred_copy"))
		insns.Add(bpf.LoadMem(bpf.R3, bpf.RFP, fpRead, bpf.DWord))
		insns.Add(bpf.JEq.Imm(bpf.R3, 0, "deferred_copy"))
		insns.Add(bpf.Add.Imm(bpf.R3, int32(ss.StartStack)))
		insns.Append(read8(bpf.RFP, fpRead, cfg.Readers.Kernel.Call(), "deferred_copy"))
		insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpRead, bpf.DWord))
		insns.Add(bpf.LoadMem(bpf.R2, bpf.R9, stateSP, bpf.DWord))
		insns.Add(bpf.JGE.Reg(bpf.R2, bpf.R1, "deferred_copy"))
		insns.Add(bpf.Sub.Reg(bpf.R1, bpf.R2))
		below := int32(cfg.Arch.CopyBelow())
		insns.Add(bpf.JGT.Imm(bpf.R1, StackCopy-below, "deferred_copy"))
		if below > 0 {
			insns.Add(bpf.Add.Imm(bpf.R1, below).WithSource(bpf.Comment(fmt.Sprintf("and the %d bytes below SP the copy starts at", below))))
		}
		insns.Add(bpf.Mov.Reg(bpf.R6, bpf.R1))
	}
	copyStack := func(label string, size int32) {
		if size > 0 {
			insns.Add(bpf.Mov.Imm(bpf.R6, size).WithSymbol(label))
			label = ""
		}
		first := bpf.Mov.Reg(bpf.R1, bpf.R9)
		if label != "" {
			first = first.WithSymbol(label)
		}
		insns.Add(first)
		insns.Add(bpf.Add.Imm(bpf.R1, int32(cfg.stackOff())))
		insns.Add(bpf.Mov.Reg(bpf.R2, bpf.R6))
		insns.Add(bpf.LoadMem(bpf.R3, bpf.R9, stateSP, bpf.DWord))
		if below := int32(cfg.Arch.CopyBelow()); below > 0 {
			insns.Add(bpf.Sub.Imm(bpf.R3, below).WithSource(bpf.Comment(fmt.Sprintf("from %d bytes below SP: Go's frame record is at SP-8", below))))
		}
		insns.Add(cfg.Readers.User.Call())
		insns.Add(bpf.JEq.Imm(bpf.R0, 0, "deferred_send"))
	}
	copyStack("deferred_copy", 0)
	copyStack("", 2048)
	copyStack("", 512)
	insns.Add(bpf.Mov.Imm(bpf.R6, 0))
	insns.Add(bpf.StoreMem(bpf.R9, deferHeader+48, bpf.R6, bpf.DWord).WithSymbol("deferred_send"))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpCtx, bpf.DWord).WithSource(bpf.Comment(fmt.Sprintf("bpf_perf_event_output(ctx, stacks, BPF_F_CURRENT_CPU, header, %d + the copy's length): not counted here", cfg.DeferredSize()-StackCopy))))
	insns.Append(outputSized("stacks", bpf.R9, deferHeader, bpf.R6, int32(cfg.DeferredSize()-StackCopy)))
	if cfg.OffCPU == nil {
		insns.Add(bpf.JEq.Imm(bpf.R0, 0, "exit"))
		insns.Add(bpf.Ja.Label("no_table"))
		return insns.Instructions
	}
	// Off-CPU: the header took the switch-out time's place; it is put
	// back, and the key is stashed marked deferred: when the thread runs
	// again, its wait goes to user space, which has its stack.
	insns.Add(bpf.LoadMem(bpf.R1, bpf.R9, int16(cfg.waitTimeOff()), bpf.DWord).WithSource(bpf.Comment("the switch-out time back, for the stash")))
	insns.Add(bpf.StoreMem(bpf.R9, stashTime, bpf.R1, bpf.DWord))
	insns.Add(bpf.JNE.Imm(bpf.R0, 0, "no_table"))
	insns.Add(bpf.Mov.Imm(bpf.R1, StopDeferred))
	insns.Add(bpf.Ja.Label("stop"))
	return insns.Instructions
}
