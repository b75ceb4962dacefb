package prog

import (
	bpf "github.com/cilium/ebpf/asm"
	"github.com/tracekit/tracekit/asm"
)

// riscv64's user registers (struct user_regs_struct: the start of pt_regs
// and all of a perf_event program's context): pc, ra, sp, gp, tp, t0 to t2,
// then s0 at 64. The context ends before status: a user-mode sample is
// told by its pc, in the lower half. A kernel-mode sample copies pc to s0.
const (
	rvPC      = 0
	rvRA      = 8
	rvSP      = 16
	rvFP      = 64
	rvRegsLen = rvFP + 8
)

// loadRegsRISCV64 loads pc, sp and s0 of the registers at from into R1,
// R2, R3, and ra into the walk's state.
func loadRegsRISCV64(from bpf.Register) bpf.Instructions {
	return bpf.Instructions{
		bpf.LoadMem(bpf.R1, from, rvPC, bpf.DWord),
		bpf.LoadMem(bpf.R2, from, rvSP, bpf.DWord),
		bpf.LoadMem(bpf.R3, from, rvFP, bpf.DWord),
		bpf.LoadMem(bpf.R4, from, rvRA, bpf.DWord),
		bpf.StoreMem(bpf.R8, stateLR, bpf.R4, bpf.DWord),
	}
}

// riscv64's sigreturn trampoline, the vdso's __vdso_rt_sigreturn and
// musl's __restore_rt alike: li a7, 139 (rt_sigreturn); ecall, as a
// little-endian u64.
const sigreturnRISCV64 = 0x0000007308b00893

// Where the interrupted code's registers are in riscv64's signal frame,
// from the stack pointer at the trampoline (struct rt_sigframe): its
// siginfo (128 bytes), then the ucontext, whose uc_mcontext (after
// uc_flags, uc_link, uc_stack, an 8-byte uc_sigmask and 120 bytes of
// room for it, aligned to 16: at 176) begins with struct user_regs_struct:
// pc, ra, sp, ..., s0.
const (
	SignalRegsRISCV64 = 128 + 176
	SignalPCRISCV64   = SignalRegsRISCV64 // ra follows
	SignalSPRISCV64   = SignalRegsRISCV64 + 16
	SignalS0RISCV64   = SignalRegsRISCV64 + 64
)

// signalFrameRISCV64 is signalFrame for riscv64: from the trampoline,
// the interrupted code's s0, pc and ra (its return address if it saved
// none: a leaf, or a function's first instructions), then sp.
func signalFrameRISCV64(cfg Config) bpf.Instructions {
	var insns asm.Seq
	insns.Append(signalCode(cfg, 8, "li a7, 139; ecall"))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpRead, bpf.DWord))
	insns.Add(bpf.LoadImm(bpf.R2, sigreturnRISCV64, bpf.DWord))
	insns.Add(bpf.JNE.Reg(bpf.R1, bpf.R2, "signal_not"))
	regs := readStack(cfg, SignalS0RISCV64, bpf.R9, stateBP, 8)
	regs[0] = regs[0].WithSource(bpf.Comment("a signal frame: s0, then pc and ra, then sp, as the signal found them"))
	insns.Append(regs)
	insns.Append(readStack(cfg, SignalPCRISCV64, bpf.RFP, fpRead, 16))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpRead+8, bpf.DWord))
	insns.Add(bpf.StoreMem(bpf.R9, stateLR, bpf.R1, bpf.DWord))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpRead, bpf.DWord))
	insns.Add(bpf.StoreMem(bpf.RFP, fpRead+8, bpf.R1, bpf.DWord))
	insns.Append(readStack(cfg, SignalSPRISCV64, bpf.RFP, fpRead, 8))
	insns.Append(signalResume())
	return insns.Instructions
}
