package prog

import (
	bpf "github.com/cilium/ebpf/asm"
	"github.com/tracekit/tracekit/asm"
)

// The x86-64 sigreturn trampoline, glibc's and musl's __restore_rt alike:
// mov $15, %rax (rt_sigreturn); syscall. Its first eight bytes as a
// little-endian u64, and the ninth.
const (
	sigreturnHead = 0x0f0000000fc0c748
	sigreturnTail = 0x05
)

// Where the interrupted code's registers are in the signal frame, from the
// stack pointer at the trampoline (the handler has returned into it,
// popping rt_sigframe.pretcode): the ucontext, whose uc_mcontext (after
// uc_flags, uc_link and uc_stack: 40 bytes) is a struct sigcontext, r8 to
// r15, rdi, rsi, rbp, rbx, rdx, rax, rcx, rsp, rip.
const (
	sigMcontext = 40
	SignalRBP   = sigMcontext + 10*8
	SignalRSP   = sigMcontext + 15*8 // rip follows
)

// signalFrame is where a walk goes that cannot step past a frame (no row,
// a rule it does not follow, no table: the reason in R1): if the code at
// pc is the sigreturn trampoline, the frame is the kernel's signal frame,
// and the walk goes on from the registers it saved (an exact pc: the
// instruction the signal interrupted, not a return address). Else the walk
// stops for that reason. The trampoline has no unwind row (musl), or a CFA
// expression (glibc): only its code says what it is. Every stack that
// ends early pays one read of nine bytes; whole ones pay nothing.
func signalFrame(cfg Config) bpf.Instructions {
	switch cfg.Arch {
	case ARM64:
		return signalFrameARM64(cfg)
	case RISCV64:
		return signalFrameRISCV64(cfg)
	}
	var insns asm.Seq
	insns.Append(signalCode(cfg, 9, "mov $15, %rax; syscall"))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpRead, bpf.DWord))
	insns.Add(bpf.LoadImm(bpf.R2, sigreturnHead, bpf.DWord))
	insns.Add(bpf.JNE.Reg(bpf.R1, bpf.R2, "signal_not"))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpRead+8, bpf.Byte))
	insns.Add(bpf.JNE.Imm(bpf.R1, sigreturnTail, "signal_not"))
	regs := readStack(cfg, SignalRSP, bpf.RFP, fpRead, 16)
	regs[0] = regs[0].WithSource(bpf.Comment("a signal frame: rsp and rip, then rbp, as the signal found them"))
	insns.Append(regs)
	insns.Append(readStack(cfg, SignalRBP, bpf.R9, stateBP, 8))
	insns.Append(signalResume())
	return insns.Instructions
}

// signalCode stores the stop's reason (R1) and reads the n bytes of code
// at pc (the sigreturn trampoline's are code) into fpRead; a failed read
// is no trampoline.
func signalCode(cfg Config, n int32, code string) bpf.Instructions {
	return bpf.Instructions{
		bpf.StoreMem(bpf.RFP, fpRule, bpf.R1, bpf.DWord).WithSymbol("signal").WithSource(bpf.Comment("no step past pc: is it the sigreturn trampoline (" + code + ")?")),
		bpf.Mov.Reg(bpf.R1, bpf.RFP),
		bpf.Add.Imm(bpf.R1, fpRead),
		bpf.Mov.Imm(bpf.R2, n),
		bpf.LoadMem(bpf.R3, bpf.R9, statePC, bpf.DWord),
		cfg.Readers.User.Call(),
		bpf.JNE.Imm(bpf.R0, 0, "signal_not"),
	}
}

// signalResume goes on from the interrupted code's sp and pc (at fpRead),
// an exact pc; signal_not stops for the reason stored.
func signalResume() bpf.Instructions {
	return bpf.Instructions{
		bpf.LoadMem(bpf.R1, bpf.RFP, fpRead, bpf.DWord),
		bpf.StoreMem(bpf.R9, stateSP, bpf.R1, bpf.DWord),
		bpf.LoadMem(bpf.R1, bpf.RFP, fpRead+8, bpf.DWord),
		bpf.StoreMem(bpf.R9, statePC, bpf.R1, bpf.DWord),
		bpf.StoreImm(bpf.R9, stateRA, 0, bpf.Word),
		bpf.Ja.Label("next"),
		bpf.LoadMem(bpf.R1, bpf.RFP, fpRule, bpf.DWord).WithSymbol("signal_not"),
		bpf.Ja.Label("stop"),
	}
}
