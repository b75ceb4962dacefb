// Package symbols names code from ELF files: their function symbols
// (.symtab and .dynsym, read in place), a separate debug file found by
// build id, a stripped Go program's .gopclntab, PLT entries named after
// their targets, and C++ and Rust names demangled. Everything it reads is
// hostile input: a malformed file gives fewer names, never a crash.
package symbols

import (
	"cmp"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/tracekit/tracekit/internal/regular"
)

// Symbol is a function: its name as the file has it, its address and size.
type Symbol struct {
	Name        string
	Value, Size uint64
}

// Functions lists a file's function symbols (.symtab and .dynsym) by
// address, their names as the file has them (symbolize demangles).
func Functions(ef *elf.File) (out []Symbol) {
	defer func() {
		if recover() != nil {
			out = nil
		}
	}()
	out = make([]Symbol, 0, count(ef))
	Each(ef, func(s Raw) {
		if t := elf.ST_TYPE(s.Info); t != elf.STT_FUNC && t != elf.STT_GNU_IFUNC || s.Value == 0 {
			return
		}
		name, _, _ := strings.Cut(s.Name, "@")
		out = append(out, Symbol{Name: name, Value: s.Value, Size: s.Size})
	})
	// The first at each address: .symtab's before .dynsym's, each in its
	// order.
	SortByAddress(out)
	return slices.CompactFunc(out, func(a, b Symbol) bool { return a.Value == b.Value })
}

// SortByAddress sorts symbols by address, those at one address in their
// order: a stable sort, in O(n log n). (slices.SortStableFunc's merges
// are O(n log² n): libc's debug symbols alone took 7 ms of a report.)
// It sorts 16-byte (address, index) pairs, then moves the symbols into
// place along the permutation's cycles.
func SortByAddress(syms []Symbol) {
	type at struct {
		value uint64
		i     int
	}
	order := make([]at, len(syms))
	for i, s := range syms {
		order[i] = at{s.Value, i}
	}
	slices.SortFunc(order, func(a, b at) int {
		if c := cmp.Compare(a.value, b.value); c != 0 {
			return c
		}
		return cmp.Compare(a.i, b.i)
	})
	for i := range order {
		if order[i].i < 0 {
			continue
		}
		// syms[j] takes syms[order[j].i], around the cycle from i.
		first, j := syms[i], i
		for {
			from := order[j].i
			order[j].i = -1
			if from == i {
				syms[j] = first
				break
			}
			syms[j] = syms[from]
			j = from
		}
	}
}

// debugDir is where Debian's -dbg packages keep debug files by build id.
const debugDir = "/usr/lib/debug/.build-id"

// DebugFile opens the separate debug file of a stripped file, found by its
// build id (/usr/lib/debug/.build-id/ab/cdef....debug), or returns nil.
func DebugFile(ef *elf.File) (*elf.File, *os.File) {
	if sec := ef.Section(".symtab"); sec != nil {
		return nil, nil
	}
	id := BuildID(ef)
	if len(id) < 2 {
		return nil, nil
	}
	osf, err := regular.Open(fmt.Sprintf("%s/%x/%x.debug", debugDir, id[:1], id[1:]))
	if err != nil {
		return nil, nil
	}
	dbg, err := NewELF(osf)
	if err != nil {
		osf.Close()
		return nil, nil
	}
	return dbg, osf
}

// BuildID reads the NT_GNU_BUILD_ID note of .note.gnu.build-id.
func BuildID(ef *elf.File) []byte {
	sec := ef.Section(".note.gnu.build-id")
	if sec == nil {
		return nil
	}
	b, err := sec.Data()
	if err != nil || len(b) < 16 {
		return nil
	}
	nameSz, descSz, typ := binary.LittleEndian.Uint32(b), binary.LittleEndian.Uint32(b[4:]), binary.LittleEndian.Uint32(b[8:])
	off := 12 + (uint64(nameSz)+3)&^3
	if typ != 3 /* NT_GNU_BUILD_ID */ || off+uint64(descSz) > uint64(len(b)) || descSz > 64 {
		return nil
	}
	return b[off : off+uint64(descSz)]
}

// Merge adds the symbols of more (which it sorts) at addresses
// syms (sorted by address, one at each) lacks: one pass over both.
func Merge(syms, more []Symbol) []Symbol {
	if len(more) == 0 {
		return syms
	}
	SortByAddress(more)
	out := make([]Symbol, 0, len(syms)+len(more))
	i := 0
	for _, s := range more {
		for i < len(syms) && syms[i].Value < s.Value {
			out = append(out, syms[i])
			i++
		}
		if i < len(syms) && syms[i].Value == s.Value || len(out) > 0 && out[len(out)-1].Value == s.Value {
			continue
		}
		out = append(out, s)
	}
	return append(out, syms[i:]...)
}

// NewELF is elf.NewFile with a panic (debug/elf has had them on malformed
// input) turned into an error.
func NewELF(r io.ReaderAt) (f *elf.File, err error) {
	defer func() {
		if p := recover(); p != nil {
			f, err = nil, fmt.Errorf("malformed ELF file (%v)", p)
		}
	}()
	return elf.NewFile(r)
}

// Of is every function a file names, sorted by address, one at each:
// .symtab's and .dynsym's, then (where they name nothing there) a
// stripped Go program's .gopclntab, the PLT entries and the separate
// debug file's .symtab (libc's __libc_start_call_main).
func Of(ef *elf.File) []Symbol {
	syms := Functions(ef)
	if ef.Section(".symtab") == nil {
		// A stripped Go program still has its own table of functions.
		syms = Merge(syms, Go(ef))
	}
	syms = Merge(syms, PLT(ef))
	if dbg, osf := DebugFile(ef); dbg != nil {
		syms = Merge(syms, Functions(dbg))
		osf.Close()
	}
	return syms
}
