package symbols

import (
	"debug/elf"
	"debug/gosym"
	"encoding/binary"
)

// maxPclntab bounds the Go table read: the largest Go programs' are tens
// of MiB.
const maxPclntab = 64 << 20

// minFuncBytes is the least a function takes in a .gopclntab: its entry
// in the function table (8 bytes since Go 1.18, 16 before) and its _func
// record (40 bytes or more).
const minFuncBytes = 48

// Go names the functions of a Go executable from its .gopclntab,
// which stripping (-ldflags='-s -w') leaves: the runtime needs it. Read
// with the standard library's debug/gosym; a malformed table names
// nothing.
func Go(ef *elf.File) (out []Symbol) {
	defer func() {
		if recover() != nil {
			out = nil
		}
	}()
	tab, text := ef.Section(".gopclntab"), ef.Section(".text")
	if tab == nil || text == nil || tab.Type == elf.SHT_NOBITS || tab.Size > maxPclntab {
		return nil
	}
	data, err := tab.Data()
	if err != nil {
		return nil
	}
	return pclntabSymbols(data, text.Addr)
}

// pclntabSymbols lists the functions of a .gopclntab whose .text starts at
// text.
func pclntabSymbols(data []byte, text uint64) (out []Symbol) {
	defer func() {
		if recover() != nil {
			out = nil
		}
	}()
	// debug/gosym allocates a Func per function the header counts (some
	// 160 bytes each), before it reads them: a count the table cannot
	// hold would exhaust the memory, beyond recover.
	if n, ok := pclntabCount(data); !ok || n > uint64(len(data)/minFuncBytes) {
		return nil
	}
	t, err := gosym.NewTable(nil, gosym.NewLineTable(data, text))
	if err != nil {
		return nil
	}
	for _, f := range t.Funcs {
		if f.End > f.Entry {
			out = append(out, Symbol{Name: f.Name, Value: f.Entry, Size: f.End - f.Entry})
		}
	}
	return out
}

// pclntabCount reads the count of functions in a .gopclntab's header, of
// the formats debug/gosym reads (Go 1.2 to 1.20+): {u32 magic; u8 pad[2];
// u8 quantum; u8 ptrsize; uintptr nfunc; ...}, little-endian.
func pclntabCount(data []byte) (uint64, bool) {
	if len(data) < 16 || data[4] != 0 || data[5] != 0 {
		return 0, false
	}
	switch binary.LittleEndian.Uint32(data) {
	case 0xfffffffb, 0xfffffffa, 0xfffffff0, 0xfffffff1: // Go 1.2, 1.16, 1.18, 1.20
	default:
		return 0, false
	}
	switch data[7] {
	case 8:
		return binary.LittleEndian.Uint64(data[8:]), true
	case 4:
		return uint64(binary.LittleEndian.Uint32(data[8:])), true
	}
	return 0, false
}
