package prog

import (
	"fmt"

	bpf "github.com/cilium/ebpf/asm"
	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/proctree"
)

// exitProg runs at sched:sched_process_exit. When the exiting thread is
// its process's last (signal->live, which do_exit has already counted
// down, is 0), a process sampled before is forgotten: seen and labels lose
// its pid, and user space is told. A new process that gets the pid again
// is then announced at its first sample, and its labels are placed anew:
// without this, it was read at the places of the one that had the pid.
func exitProg(cfg Config) bpf.Instructions {
	var insns asm.Seq
	insns.Add(bpf.StoreMem(bpf.RFP, fpCtx, bpf.R1, bpf.DWord))
	insns.Append(asm.CurrentPid())
	if cfg.NS != nil {
		insns.Append(asm.CurrentNsPid(*cfg.NS, fpRead))
		insns.Append(asm.Note(bpf.Instructions{bpf.JEq.Imm(asm.RegPid, 0, "exit")}, "a task outside this pid namespace: never seen"))
	}
	insns.Add(asm.StoreKey(fpTgid, asm.RegPid, bpf.Word))
	insns.Append(currentU64(cfg, cfg.Exit.Signal, fpRead, fmt.Sprintf("current->signal (+%d)", cfg.Exit.Signal)))
	insns.Add(bpf.LoadMem(bpf.R3, bpf.RFP, fpRead, bpf.DWord))
	insns.Add(bpf.JEq.Imm(bpf.R3, 0, "exit"))
	insns.Add(bpf.Add.Imm(bpf.R3, int32(cfg.Exit.Live)).WithSource(bpf.Comment(fmt.Sprintf("signal->live (+%d): the threads still running; 0 when this one is the last", cfg.Exit.Live))))
	insns.Add(bpf.Mov.Reg(bpf.R1, bpf.RFP))
	insns.Add(bpf.Add.Imm(bpf.R1, fpRead))
	insns.Add(bpf.Mov.Imm(bpf.R2, 4))
	insns.Add(cfg.Readers.Kernel.Call())
	insns.Add(bpf.JNE.Imm(bpf.R0, 0, "exit"))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpRead, bpf.Word))
	insns.Add(bpf.JNE.Imm(bpf.R1, 0, "exit"))
	insns.Append(asm.Note(asm.MapDelete("seen", fpTgid), "the process is gone: forget it (not seen: nothing to tell)"))
	insns.Add(bpf.JNE.Imm(bpf.R0, 0, "exit"))
	if len(cfg.Labels) > 0 || cfg.Context {
		insns.Append(asm.MapDelete("labels", fpTgid))
	}
	insns.Append(notify(EventExit))
	insns.Append(asm.Return("exit", 0))
	return insns.Instructions
}

// execProg tells user space that a process exec'd whose mappings it must
// read at once (the libraries the loader maps next are found when the
// unwinder first misses in them, or at the next rescan): a process sampled
// before, or (-c) any process of the command's tree, which is marked seen.
// Without that, a child of the command was first read at its first sample,
// and the samples taken until its tables were loaded fell back to frame
// pointers, which a program built without them turns to garbage.
func execProg(cfg Config) bpf.Instructions {
	var insns asm.Seq
	insns.Add(bpf.StoreMem(bpf.RFP, fpCtx, bpf.R1, bpf.DWord))
	insns.Append(asm.CurrentPid())
	if cfg.Tree != nil {
		insns.Add(asm.StoreKey(fpTgid, asm.RegPid, bpf.Word))
		insns.Append(asm.Note(asm.MapLookup(proctree.PidsMap, fpTgid), "r8 = in the command's tree (the kernel's pid)"))
		insns.Add(bpf.Mov.Reg(bpf.R8, bpf.R0))
	}
	if cfg.NS != nil {
		insns.Append(asm.CurrentNsPid(*cfg.NS, fpRead))
	}
	insns.Add(asm.StoreKey(fpTgid, asm.RegPid, bpf.Word))
	insns.Append(asm.Note(asm.MapLookup("seen", fpTgid), "exec of a process seen before: tell user space"))
	if cfg.Tree == nil {
		insns.Add(bpf.JEq.Imm(bpf.R0, 0, "exit"))
	} else {
		insns.Add(bpf.JNE.Imm(bpf.R0, 0, "tell"))
		insns.Add(bpf.JEq.Imm(bpf.R8, 0, "exit"))
		insns.Add(bpf.Mov.Imm(bpf.R1, 0).WithSource(bpf.Comment("a process of the tree: seen now (its first sample tells nothing new)")))
		insns.Add(bpf.StoreMem(bpf.RFP, fpNow, bpf.R1, bpf.DWord))
		insns.Append(asm.MapUpdate("seen", fpTgid, fpNow, asm.UpdateNoExist))
		insns.Add(asm.Nop().WithSymbol("tell"))
	}
	insns.Append(notify(EventNew))
	insns.Append(asm.Return("exit", 0))
	return insns.Instructions
}
