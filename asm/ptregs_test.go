package asm

import (
	"strconv"
	"strings"
	"testing"

	bpf "github.com/cilium/ebpf/asm"
)

// The x86-64 offsets as arch/x86/include/asm/ptrace.h lays them out
// (REFERENCE.md: r15 0 ... rdi 112, rip 128, rsp 152), and one clear error
// for an architecture without a table.
func TestPtRegs(t *testing.T) {
	r, err := PtRegs("amd64")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int16{"di": 112, "si": 104, "dx": 96, "cx": 88, "r8": 72, "r9": 64}
	if len(r.Args) != len(r.ArgNames) {
		t.Fatalf("%d offsets, %d names", len(r.Args), len(r.ArgNames))
	}
	for i, name := range r.ArgNames {
		if r.Args[i] != want[name] {
			t.Errorf("argument %d (%%%s) at %d, want %d", i+1, name, r.Args[i], want[name])
		}
	}
	if r.Ret != 80 || r.IP != 128 || r.SP != 152 {
		t.Errorf("ax %d, ip %d, sp %d", r.Ret, r.IP, r.SP)
	}
	// The named table agrees with the argument table and with ptrace.h's
	// order: r15 first, then 8 bytes each, orig_ax skipped at 120.
	order := []string{"r15", "r14", "r13", "r12", "rbp", "rbx", "r11", "r10", "r9", "r8", "rax", "rcx", "rdx", "rsi", "rdi"}
	for i, name := range order {
		if r.Named[name] != int16(8*i) {
			t.Errorf("%s at %d, want %d", name, r.Named[name], 8*i)
		}
	}
	if r.Named["rip"] != r.IP || r.Named["rsp"] != r.SP || r.Named["rdi"] != r.Args[0] || r.Named["rax"] != r.Ret || len(r.Named) != len(order)+2 {
		t.Errorf("named table %v", r.Named)
	}
	// cs and ss follow rip (cs, flags, sp, ss): 21 registers of 8 bytes.
	if r.FP != r.Named["rbp"] || r.CS != r.IP+8 || r.Size != 21*8 {
		t.Errorf("fp %d, cs %d, size %d", r.FP, r.CS, r.Size)
	}
	if r.SyscallPrefix != "__x64_sys_" {
		t.Errorf("syscall wrappers %q", r.SyscallPrefix)
	}
	// A syscall's arguments: rdi, rsi, rdx, r10, r8, r9; its number in
	// orig_ax, between rdi and rip.
	for i, name := range []string{"rdi", "rsi", "rdx", "r10", "r8", "r9"} {
		if r.SyscallArgs[i] != r.Named[name] {
			t.Errorf("syscall argument %d at %d, want %s's %d", i+1, r.SyscallArgs[i], name, r.Named[name])
		}
	}
	if len(r.SyscallArgs) != 6 || r.SyscallNr != 120 {
		t.Errorf("%d syscall arguments, number at %d", len(r.SyscallArgs), r.SyscallNr)
	}
	if _, err := PtRegs("ppc64le"); err == nil || !strings.Contains(err.Error(), "ppc64le") {
		t.Errorf("ppc64le: %v", err)
	}
}

// arm64's layout (arch/arm64/include/asm/ptrace.h): regs[31], sp, pc.
func TestPtRegsARM64(t *testing.T) {
	r, err := PtRegs("arm64")
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Args) != 8 || len(r.ArgNames) != 8 {
		t.Fatalf("%d argument offsets, %d names; want x0-x7", len(r.Args), len(r.ArgNames))
	}
	for i := range r.Args {
		if r.Args[i] != int16(8*i) || r.ArgNames[i] != "x"+strconv.Itoa(i) {
			t.Errorf("argument %d: %s at %d", i+1, r.ArgNames[i], r.Args[i])
		}
	}
	if r.Named["x30"] != 240 || r.Named["sp"] != 248 || r.Named["pc"] != 256 || r.IP != 256 || r.SP != 248 || r.Ret != 0 || len(r.Named) != 33 {
		t.Errorf("x30 %d, sp %d, pc %d, ip %d, ret %d, %d names", r.Named["x30"], r.Named["sp"], r.Named["pc"], r.IP, r.Ret, len(r.Named))
	}
	if r.FP != r.Named["x29"] || r.CS != 0 || r.Size != 0 {
		t.Errorf("fp %d, cs %d, size %d: x29, and no fixed size", r.FP, r.CS, r.Size)
	}
	if r.SyscallPrefix != "__arm64_sys_" {
		t.Errorf("syscall wrappers %q", r.SyscallPrefix)
	}
	if len(r.SyscallArgs) != 6 || r.SyscallArgs[5] != 40 || r.SyscallNr != 280 {
		t.Errorf("syscall arguments %v, number at %d", r.SyscallArgs, r.SyscallNr)
	}
}

// riscv64's layout (arch/riscv/include/asm/ptrace.h): epc, then x1-x31
// by their ABI names, 8 bytes each. The kernel package checks it against
// the kernel's BTF where that is riscv64's.
func TestPtRegsRISCV64(t *testing.T) {
	r, err := PtRegs("riscv64")
	if err != nil {
		t.Fatal(err)
	}
	abi := []string{"ra", "sp", "gp", "tp", "t0", "t1", "t2", "s0", "s1", "a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7",
		"s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9", "s10", "s11", "t3", "t4", "t5", "t6"}
	for i, name := range abi {
		if r.Named[name] != int16(8*(i+1)) {
			t.Errorf("%s (x%d) at %d, want %d", name, i+1, r.Named[name], 8*(i+1))
		}
	}
	if len(r.Named) != len(abi)+2 || r.Named["pc"] != 0 || r.Named["epc"] != 0 || r.IP != 0 {
		t.Errorf("named table %v, ip %d", r.Named, r.IP)
	}
	if len(r.Args) != 8 || len(r.ArgNames) != 8 {
		t.Fatalf("%d argument offsets, %d names; want a0-a7", len(r.Args), len(r.ArgNames))
	}
	for i := range r.Args {
		if name := "a" + strconv.Itoa(i); r.ArgNames[i] != name || r.Args[i] != r.Named[name] {
			t.Errorf("argument %d: %s at %d", i+1, r.ArgNames[i], r.Args[i])
		}
	}
	if r.Ret != r.Named["a0"] || r.SP != r.Named["sp"] || r.FP != r.Named["s0"] || r.CS != 0 || r.Size != 0 {
		t.Errorf("ret %d, sp %d, fp %d, cs %d, size %d", r.Ret, r.SP, r.FP, r.CS, r.Size)
	}
	if r.SyscallPrefix != "__riscv_sys_" || len(r.SyscallArgs) != 6 || r.SyscallArgs[0] != 280 || r.SyscallArgs[1] != r.Named["a1"] || r.SyscallArgs[5] != r.Named["a5"] || r.SyscallNr != r.Named["a7"] {
		t.Errorf("syscall wrappers %q, arguments %v, number at %d", r.SyscallPrefix, r.SyscallArgs, r.SyscallNr)
	}
}

// 32-bit ARM's layout (arch/arm/include/uapi/asm/ptrace.h): uregs[18] of
// 4 bytes, r0-r15, cpsr, orig_r0; the names gcc's USDT notes use for
// r11-r15; no syscall wrappers.
func TestPtRegsARM(t *testing.T) {
	r, err := PtRegs("arm")
	if err != nil {
		t.Fatal(err)
	}
	if r.Width != 4 || r.Load() != bpf.Word || r.Size != 18*4 {
		t.Errorf("width %d, size %d: want 4-byte registers, 72 bytes", r.Width, r.Size)
	}
	for i := 0; i < 16; i++ {
		if name := "r" + strconv.Itoa(i); r.Named[name] != int16(4*i) {
			t.Errorf("%s at %d, want %d", name, r.Named[name], 4*i)
		}
	}
	for name, n := range map[string]string{"fp": "r11", "ip": "r12", "sp": "r13", "lr": "r14", "pc": "r15"} {
		if r.Named[name] != r.Named[n] {
			t.Errorf("%s at %d, %s at %d", name, r.Named[name], n, r.Named[n])
		}
	}
	if len(r.Named) != 21 || len(r.Args) != 4 || len(r.ArgNames) != 4 {
		t.Fatalf("%d names, %d arguments (%v): want r0-r3", len(r.Named), len(r.Args), r.ArgNames)
	}
	for i := range r.Args {
		if name := "r" + strconv.Itoa(i); r.ArgNames[i] != name || r.Args[i] != r.Named[name] {
			t.Errorf("argument %d: %s at %d", i+1, r.ArgNames[i], r.Args[i])
		}
	}
	if r.Ret != 0 || r.IP != 60 || r.SP != 52 || r.FP != 44 || r.CS != 0 {
		t.Errorf("ret %d, ip %d, sp %d, fp %d, cs %d", r.Ret, r.IP, r.SP, r.FP, r.CS)
	}
	if r.SyscallPrefix != "" || len(r.SyscallArgs) != 6 || r.SyscallArgs[0] != 68 || r.SyscallArgs[5] != r.Named["r5"] || r.SyscallNr != r.Named["r7"] {
		t.Errorf("syscall wrappers %q, arguments %v, number at %d", r.SyscallPrefix, r.SyscallArgs, r.SyscallNr)
	}
	// Every 64-bit table reads 8-byte registers.
	for _, arch := range []string{"amd64", "arm64", "riscv64"} {
		if r, _ := PtRegs(arch); r.Width != 8 || r.Load() != bpf.DWord {
			t.Errorf("%s: width %d", arch, r.Width)
		}
	}
}
