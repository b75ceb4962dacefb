package asm

import (
	"fmt"
	"runtime"

	bpf "github.com/cilium/ebpf/asm"
)

// Regs locates, in the struct pt_regs a kprobe or uprobe program gets as
// its context, the registers it reads, for one architecture.
type Regs struct {
	Arch string
	// Args are the argument registers' offsets in calling-convention
	// order; ArgNames are the same registers as kprobe_events fetch
	// arguments name them ("%di").
	Args     []int16
	ArgNames []string
	Ret      int16 // the return value, at a return probe
	IP, SP   int16
	// Named are every general register's offset by its 64-bit name, as a
	// USDT argument spec names them ("rax", "r13", "rip").
	Named map[string]int16
	// SyscallPrefix starts the kernel's syscall wrappers (4.17+), whose one
	// argument is the user's struct pt_regs: "__x64_sys_" (write is
	// __x64_sys_write).
	SyscallPrefix string
	// SyscallArgs are a syscall's six argument registers in that struct,
	// in order: the C convention's but for x86-64's fourth, r10 (rcx
	// holds the return address there).
	SyscallArgs []int16
	// SyscallNr is the syscall's number in that struct, a 32-bit read
	// (x86-64's orig_ax, arm64's syscallno).
	SyscallNr int16
	// FP is the frame pointer's offset (rbp, x29); CS x86-64's code
	// segment's (0 elsewhere).
	FP, CS int16
	// Size is the struct's size where it is the same on every kernel
	// (x86-64's); 0 where it is not (arm64's has grown).
	Size int16
	// Width is a register's size in bytes: 8, or 4 on 32-bit ARM.
	Width int
}

// Load is the size a load of one register reads: bpf.DWord, or bpf.Word
// for 4-byte registers.
func (r *Regs) Load() bpf.Size { return LoadSize(r.Width) }

// LoadSize is the load size of a width-byte register: bpf.Word for 4,
// bpf.DWord for 8 (and for 0, a table that did not say: a 64-bit CPU's).
func LoadSize(width int) bpf.Size {
	if width == 4 {
		return bpf.Word
	}
	return bpf.DWord
}

// AMD64Size is sizeof(struct pt_regs) on x86-64, as a constant for layouts
// that hold a copy.
const AMD64Size = 168

// AMD64 is x86-64's pt_regs (arch/x86/include/asm/ptrace.h: r15 at 0 ...
// rdi 112, orig_ax 120, ip 128, cs, flags, sp 152, ss; 168 bytes).
var AMD64 = &Regs{
	Arch:     "amd64",
	Args:     []int16{112, 104, 96, 88, 72, 64}, // rdi, rsi, rdx, rcx, r8, r9
	ArgNames: []string{"di", "si", "dx", "cx", "r8", "r9"},
	Ret:      80, // rax
	IP:       128,
	SP:       152,
	FP:       32,
	CS:       136,
	Size:     AMD64Size,
	Width:    8,
	Named: map[string]int16{
		"r15": 0, "r14": 8, "r13": 16, "r12": 24, "rbp": 32, "rbx": 40, "r11": 48, "r10": 56,
		"r9": 64, "r8": 72, "rax": 80, "rcx": 88, "rdx": 96, "rsi": 104, "rdi": 112, "rip": 128, "rsp": 152,
	},
	SyscallPrefix: "__x64_sys_",
	SyscallArgs:   []int16{112, 104, 96, 56, 72, 64}, // rdi, rsi, rdx, r10, r8, r9
	SyscallNr:     120,                               // orig_ax
}

// ARM64 is arm64's pt_regs (arch/arm64/include/asm/ptrace.h: regs[31],
// x0 at 0 ... x30 at 240, then sp 248, pc 256, pstate 264, orig_x0 272,
// s32 syscallno 280). Arguments are x0-x7 (a syscall's x0-x5), the return
// value x0.
var ARM64 = func() *Regs {
	r := &Regs{Arch: "arm64", Width: 8, Ret: 0, IP: 256, SP: 248, FP: 29 * 8, Named: map[string]int16{"sp": 248, "pc": 256}, SyscallPrefix: "__arm64_sys_", SyscallNr: 280}
	for i := 0; i < 31; i++ {
		r.Named[fmt.Sprintf("x%d", i)] = int16(8 * i)
	}
	for i := 0; i < 8; i++ {
		r.Args = append(r.Args, int16(8*i))
		r.ArgNames = append(r.ArgNames, fmt.Sprintf("x%d", i))
	}
	r.SyscallArgs = r.Args[:6]
	return r
}()

// RISCV64 is riscv64's pt_regs (arch/riscv/include/asm/ptrace.h: epc at
// 0, then x1-x31 at 8*n: ra 8, sp 16, gp, tp, t0-t2, s0 64, s1, a0 80 ...
// a7 136, s2-s11, t3-t6, then status, badaddr, cause, orig_a0).
// Arguments are a0-a7 (a syscall's orig_a0 and a1-a5, its number a7),
// the return value a0, the frame pointer s0. The syscall wrappers are
// 6.6's.
var RISCV64 = func() *Regs {
	r := &Regs{Arch: "riscv64", Width: 8, Ret: 80, IP: 0, SP: 16, FP: 64, Named: map[string]int16{"pc": 0, "epc": 0}, SyscallPrefix: "__riscv_sys_", SyscallNr: 136}
	for i, name := range []string{"ra", "sp", "gp", "tp", "t0", "t1", "t2", "s0", "s1",
		"a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7",
		"s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9", "s10", "s11", "t3", "t4", "t5", "t6"} {
		r.Named[name] = int16(8 * (i + 1))
	}
	for i := 0; i < 8; i++ {
		r.Args = append(r.Args, int16(80+8*i))
		r.ArgNames = append(r.ArgNames, fmt.Sprintf("a%d", i))
	}
	// The entry code moves a0 to orig_a0 (280) and puts -ENOSYS in a0:
	// a syscall's first argument is orig_a0 from then on, as the wrappers
	// read it (SC_RISCV_REGS_TO_ARGS).
	r.SyscallArgs = append([]int16{280}, r.Args[1:6]...)
	return r
}()

// ARM is 32-bit ARM's pt_regs (arch/arm/include/uapi/asm/ptrace.h:
// long uregs[18], r0-r10 at 4*n, fp (r11) 44, ip 48, sp 52, lr 56, pc 60,
// cpsr 64, orig_r0 68; 72 bytes). Registers are 4 bytes. Arguments are
// r0-r3 (a fifth is on the stack), the return value r0, the frame pointer
// fp in ARM code (Thumb code keeps it in r7). Syscalls have no wrappers:
// sys_write takes its arguments in registers, as any function does. A
// syscall's first argument is orig_r0 once the entry code has run, as
// syscall_get_arguments reads it; its number is r7 (EABI).
var ARM = func() *Regs {
	r := &Regs{Arch: "arm", Width: 4, Ret: 0, IP: 60, SP: 52, FP: 44, Size: 72, SyscallNr: 28,
		Named: map[string]int16{"fp": 44, "ip": 48, "sp": 52, "lr": 56, "pc": 60}}
	for i := 0; i < 16; i++ {
		r.Named[fmt.Sprintf("r%d", i)] = int16(4 * i)
	}
	for i := 0; i < 4; i++ {
		r.Args = append(r.Args, int16(4*i))
		r.ArgNames = append(r.ArgNames, fmt.Sprintf("r%d", i))
	}
	r.SyscallArgs = []int16{68, 4, 8, 12, 16, 20}
	return r
}()

var ptRegs = map[string]*Regs{"amd64": AMD64, "arm64": ARM64, "riscv64": RISCV64, "arm": ARM}

// PtRegs returns the pt_regs layout of arch (a GOARCH), or an error that
// says which architectures are known: the one guard every reader of
// registers goes through.
func PtRegs(arch string) (*Regs, error) {
	if r, ok := ptRegs[arch]; ok {
		return r, nil
	}
	return nil, fmt.Errorf("reading registers at a probe needs the CPU's pt_regs layout: this build knows x86-64 (amd64), arm64, riscv64 and 32-bit ARM (arm), not %s", arch)
}

// HostPtRegs is PtRegs of the architecture this binary runs on.
func HostPtRegs() (*Regs, error) { return PtRegs(runtime.GOARCH) }
