package symbols

import (
	"debug/elf"
	"io"
	"strings"
)

// Bounds of one symbol table read by Each: its string table is
// read whole (libLLVM-14's .dynstr is 3.1 MiB), its entries 4096 at a
// time. A table past either bound is skipped.
const (
	maxStrtab  = 64 << 20
	maxSymbols = 1 << 22
	symBatch   = 4096
)

// Raw is one entry of a symbol table, its name a substring of the
// table's strings (one allocation for the table, none for a name).
type Raw struct {
	Index       int // in its table: debug/elf's lists start at 1
	Name        string
	Info, Other byte
	Section     elf.SectionIndex
	Value, Size uint64
}

// Each calls fn for every symbol of ef's .symtab, then of its
// .dynsym (the null entry of each left out), as debug/elf's Symbols and
// DynamicSymbols list them, without making either list: their names
// (libLLVM-14's 44,982 dynamic symbols) are 10.7 MiB as debug/elf
// builds them, a tenth of that here. A table or string table that is
// malformed, compressed or past the bounds is skipped; a name is cut at
// its string table's end.
func Each(ef *elf.File, fn func(s Raw)) {
	for _, typ := range []elf.SectionType{elf.SHT_SYMTAB, elf.SHT_DYNSYM} {
		if sec := TableOf(ef, typ); sec != nil {
			In(ef, sec, fn)
		}
	}
}

// TableOf is ef's first section of type typ, SHT_SYMTAB or
// SHT_DYNSYM, as debug/elf finds it.
func TableOf(ef *elf.File, typ elf.SectionType) *elf.Section {
	for _, sec := range ef.Sections {
		if sec.Type == typ {
			return sec
		}
	}
	return nil
}

// count is how many symbols Each may give: a capacity.
func count(ef *elf.File) int {
	n := 0
	for _, typ := range []elf.SectionType{elf.SHT_SYMTAB, elf.SHT_DYNSYM} {
		if sec := TableOf(ef, typ); sec != nil {
			n += int(min(sec.Size/uint64(entrySize(ef)), maxSymbols))
		}
	}
	return n
}

// entrySize is the size of one symbol table entry of ef's class.
func entrySize(ef *elf.File) int {
	if ef.Class == elf.ELFCLASS32 {
		return 16
	}
	return 24
}

func In(ef *elf.File, sec *elf.Section, fn func(s Raw)) {
	size := entrySize(ef)
	if sec.Flags&elf.SHF_COMPRESSED != 0 || sec.Size/uint64(size) > maxSymbols || int(sec.Link) >= len(ef.Sections) {
		return
	}
	strs := ef.Sections[sec.Link]
	if strs.Type != elf.SHT_STRTAB || strs.Flags&elf.SHF_COMPRESSED != 0 || strs.Size > maxStrtab {
		return
	}
	var sb strings.Builder
	sb.Grow(int(strs.Size))
	if n, err := io.Copy(&sb, io.NewSectionReader(strs.ReaderAt, 0, int64(strs.Size))); err != nil || n != int64(strs.Size) {
		return
	}
	table := sb.String()
	name := func(off uint32) string {
		if uint64(off) >= uint64(len(table)) {
			return ""
		}
		s := table[off:]
		if end := strings.IndexByte(s, 0); end >= 0 {
			s = s[:end]
		}
		return s
	}
	bo := ef.ByteOrder
	n := int(sec.Size) / size
	batch := make([]byte, size*min(n, symBatch))
	r := io.NewSectionReader(sec.ReaderAt, 0, int64(sec.Size))
	for i := 0; i < n; i += symBatch {
		b := batch[:size*min(symBatch, n-i)]
		if _, err := r.ReadAt(b, int64(i*size)); err != nil {
			return
		}
		for j := 0; j < len(b); j += size {
			if i == 0 && j == 0 {
				continue // the null symbol
			}
			e := b[j : j+size]
			s := Raw{Index: i + j/size}
			if size == 24 {
				s.Name, s.Info, s.Other = name(bo.Uint32(e)), e[4], e[5]
				s.Section, s.Value, s.Size = elf.SectionIndex(bo.Uint16(e[6:])), bo.Uint64(e[8:]), bo.Uint64(e[16:])
			} else {
				s.Name, s.Value, s.Size = name(bo.Uint32(e)), uint64(bo.Uint32(e[4:])), uint64(bo.Uint32(e[8:]))
				s.Info, s.Other, s.Section = e[12], e[13], elf.SectionIndex(bo.Uint16(e[14:]))
			}
			fn(s)
		}
	}
}
