package symbols

import (
	"debug/elf"
	"encoding/binary"
)

// PLT names a file's PLT entries after the functions they jump to:
// the i-th relocation of .rela.plt is the i-th entry (x86-64: of .plt.sec
// where the linker made one for IBT, else of .plt after its 16-byte
// header; arm64 and riscv64: of .plt after its 32-byte header), as perf
// reads them.
func PLT(ef *elf.File) (out []Symbol) {
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
	dyn := TableOf(ef, elf.SHT_DYNSYM)
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
	In(ef, dyn, func(s Raw) {
		if _, ok := names[s.Index]; ok {
			names[s.Index] = s.Name
		}
	})
	for i := uint64(0); i < n; i++ {
		info := binary.LittleEndian.Uint64(data[24*i+8:])
		name := names[int(info>>32)]
		if uint32(info) != jumpSlot || info>>32 == 0 || name == "" {
			continue
		}
		// A new string: the name's would keep the whole string table.
		out = append(out, Symbol{Name: name + "@plt", Value: plt.Addr + first + i*size, Size: size})
	}
	return out
}

// maxPLTEntries bounds the work a hostile .rela.plt can cause (libLLVM's
// PLT has 4,000 entries).
const maxPLTEntries = 1 << 20
