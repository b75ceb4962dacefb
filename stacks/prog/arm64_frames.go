package prog

import (
	bpf "github.com/cilium/ebpf/asm"
	"github.com/tracekit/tracekit/asm"
)

// arm64's user registers (struct user_pt_regs, the start of pt_regs and
// of a perf_event program's context): x29 at 232, x30, sp, pc, then
// pstate, whose mode bits are 0 in EL0 (user mode, AArch64: a 32-bit
// task's have PSR_MODE32_BIT). A kernel-mode sample copies these five.
const (
	armFP       = 29 * 8
	armLR       = 30 * 8
	armSP       = 31 * 8
	armPC       = 32 * 8
	armPstate   = 33 * 8
	armModeMask = 0x1f
	armRegsLen  = armPstate + 8 - armFP
)

// loadRegsARM64 loads pc, sp and x29 of the registers at from (less base:
// the copy starts at x29) into R1, R2, R3, and x30 into the walk's state.
func loadRegsARM64(from bpf.Register, base int16) bpf.Instructions {
	return bpf.Instructions{
		bpf.LoadMem(bpf.R1, from, armPC-base, bpf.DWord),
		bpf.LoadMem(bpf.R2, from, armSP-base, bpf.DWord),
		bpf.LoadMem(bpf.R3, from, armFP-base, bpf.DWord),
		bpf.LoadMem(bpf.R4, from, armLR-base, bpf.DWord),
		bpf.StoreMem(bpf.R8, stateLR, bpf.R4, bpf.DWord),
	}
}

// arm64's rule word's fields (see unwind.ARM64).
const (
	armSavesShift = 2
	armSlotShift  = 4
	armSlotMask   = 1<<13 - 1
	armCFAShift   = 17
	// UserAddressMask keeps the 48 bits of an arm64 user address: a
	// return address signed by pointer authentication (or tagged) has
	// its code above them.
	UserAddressMask = 1<<48 - 1
)

// stripPAC clears the bits of reg above a user address (tmp clobbered).
func stripPAC(reg, tmp bpf.Register) bpf.Instructions {
	return bpf.Instructions{
		bpf.LoadImm(tmp, UserAddressMask, bpf.DWord),
		bpf.And.Reg(reg, tmp),
	}
}

// arm64's sigreturn trampoline, the vdso's __kernel_rt_sigreturn and
// musl's __restore_rt alike: mov x8, #139 (rt_sigreturn); svc #0, as a
// little-endian u64.
const sigreturnARM64 = -0x2bfffffe2d7fee98

// Where the interrupted code's registers are in arm64's signal frame, from
// the stack pointer at the trampoline (the frame's start, struct
// rt_sigframe): its siginfo (128 bytes), then the ucontext, whose
// uc_mcontext (after uc_flags, uc_link, uc_stack and a 128-byte
// uc_sigmask, aligned to 16: at 176) is a struct sigcontext,
// fault_address, x0 to x30, sp, pc.
const (
	SignalRegsARM64 = 128 + 176 + 8
	SignalX29ARM64  = SignalRegsARM64 + 29*8 // x30 follows
	SignalSPARM64   = SignalRegsARM64 + 31*8 // pc follows
)

// signalFrameARM64 is signalFrame for arm64: from the trampoline, the
// interrupted code's pc, sp, x29 and x30 (its return address if it saved
// none: a leaf, or a function's first instructions).
func signalFrameARM64(cfg Config) bpf.Instructions {
	var insns asm.Seq
	insns.Append(signalCode(cfg, 8, "mov x8, #139; svc #0"))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpRead, bpf.DWord))
	insns.Add(bpf.LoadImm(bpf.R2, int64(sigreturnARM64), bpf.DWord))
	insns.Add(bpf.JNE.Reg(bpf.R1, bpf.R2, "signal_not"))
	regs := readStack(cfg, SignalX29ARM64, bpf.RFP, fpRead, 16)
	regs[0] = regs[0].WithSource(bpf.Comment("a signal frame: x29 and x30, then sp and pc, as the signal found them"))
	insns.Append(regs)
	insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpRead, bpf.DWord))
	insns.Add(bpf.StoreMem(bpf.R9, stateBP, bpf.R1, bpf.DWord))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpRead+8, bpf.DWord))
	insns.Add(bpf.StoreMem(bpf.R9, stateLR, bpf.R1, bpf.DWord))
	insns.Append(readStack(cfg, SignalSPARM64, bpf.RFP, fpRead, 16))
	insns.Append(signalResume())
	return insns.Instructions
}
