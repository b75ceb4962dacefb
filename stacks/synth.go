package stacks

import (
	"bytes"
	"debug/elf"
)

// Names the symbol tables do not hold, made up as perf and objdump make
// them up: a PLT entry is "function@plt", and the signal return
// trampoline of a libc whose symbols are stripped (musl's libc.so, glibc's
// without its debug file) is "__restore_rt" when its code says it is.

// sigreturnCode is the signal return trampoline (glibc's and musl's
// __restore_rt) of each architecture: x86-64's mov $15, %rax; syscall,
// arm64's mov x8, #139; svc #0 (also the vdso's __kernel_rt_sigreturn),
// and riscv64's li a7, 139; ecall (the vdso's __vdso_rt_sigreturn).
var sigreturnCode = map[elf.Machine][]byte{
	elf.EM_X86_64:  {0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05},
	elf.EM_AARCH64: {0x68, 0x11, 0x80, 0xd2, 0x01, 0x00, 0x00, 0xd4},
	elf.EM_RISCV:   {0x93, 0x08, 0xb0, 0x08, 0x73, 0x00, 0x00, 0x00},
}

// isSigreturn reports whether the code at virtual address v of the file
// is the signal return trampoline.
func (f *file) isSigreturn(v uint64) bool {
	want := sigreturnCode[f.elf.Machine]
	if want == nil {
		return false
	}
	if is, ok := f.sigreturn[v]; ok {
		return is
	}
	var is bool
	for _, p := range f.progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && v >= p.Vaddr && v-p.Vaddr < p.Filesz && p.Filesz-(v-p.Vaddr) >= uint64(len(want)) {
			got := make([]byte, len(want))
			_, err := p.ReadAt(got, int64(v-p.Vaddr))
			is = err == nil && bytes.Equal(got, want)
			break
		}
	}
	if f.sigreturn == nil {
		f.sigreturn = map[uint64]bool{}
	}
	if len(f.sigreturn) < maxSigreturnChecks {
		f.sigreturn[v] = is
	}
	return is
}

// maxSigreturnChecks bounds the addresses remembered per file.
const maxSigreturnChecks = 4096
