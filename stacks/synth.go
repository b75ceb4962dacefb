package stacks

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
)

// Names the symbol tables do not hold, made up as perf and objdump make
// them up: a PLT entry is "function@plt", and the signal return
// trampoline of a libc whose symbols are stripped (musl's libc.so, glibc's
// without its debug file) is "__restore_rt" when its code says it is.

// pltSymbols names a file's PLT entries after the functions they jump to:
// the i-th relocation of .rela.plt is the i-th entry (x86-64: of .plt.sec
// where the linker made one for IBT, else of .plt after its 16-byte
// header; arm64 and riscv64: of .plt after its 32-byte header), as perf
// reads them.
func pltSymbols(ef *elf.File) (out []symbol) {
	defer func() {
		if recover() != nil { // debug/elf on a hostile file
			out = nil
		}
	}()
	rela := ef.Section(".rela.plt")
	if rela == nil || ef.Class != elf.ELFCLASS64 || rela.Type != elf.SHT_RELA {
		return nil
	}
	var plt *elf.Section
	var first, size uint64 = 0, 16
	var jumpSlot uint32
	switch ef.Machine {
	case elf.EM_X86_64:
		jumpSlot = uint32(elf.R_X86_64_JMP_SLOT)
		if plt = ef.Section(".plt.sec"); plt == nil {
			plt, first = ef.Section(".plt"), 16
		}
	case elf.EM_AARCH64:
		jumpSlot = uint32(elf.R_AARCH64_JUMP_SLOT)
		plt, first = ef.Section(".plt"), 32
	case elf.EM_RISCV:
		jumpSlot = uint32(elf.R_RISCV_JUMP_SLOT)
		plt, first = ef.Section(".plt"), 32
	}
	if plt == nil || plt.Size < first {
		return nil
	}
	n := min(rela.Size/24, (plt.Size-first)/size, maxPLTEntries)
	data := make([]byte, 24*n)
	if _, err := rela.ReadAt(data, 0); err != nil {
		return nil
	}
	dyn := symbolTable(ef, elf.SHT_DYNSYM)
	if dyn == nil {
		return nil
	}
	// The names of the symbols the entries jump to, only: libLLVM-14's
	// 4,000 of its 44,982.
	names := map[int]string{}
	for i := uint64(0); i < n; i++ {
		if info := binary.LittleEndian.Uint64(data[24*i+8:]); uint32(info) == jumpSlot && info>>32 != 0 && info>>32 <= maxSymbols {
			names[int(info>>32)] = ""
		}
	}
	symbolsIn(ef, dyn, func(s elfSym) {
		if _, ok := names[s.index]; ok {
			names[s.index] = s.name
		}
	})
	for i := uint64(0); i < n; i++ {
		info := binary.LittleEndian.Uint64(data[24*i+8:])
		name := names[int(info>>32)]
		if uint32(info) != jumpSlot || info>>32 == 0 || name == "" {
			continue
		}
		// A new string: the name's would keep the whole string table.
		out = append(out, symbol{name: name + "@plt", value: plt.Addr + first + i*size, size: size})
	}
	return out
}

// maxPLTEntries bounds the work a hostile .rela.plt can cause (libLLVM's
// PLT has 4,000 entries).
const maxPLTEntries = 1 << 20

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
