package stacks

import (
	"bufio"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/tracekit/tracekit/stacks/prog"
)

// A shared library's thread-locals are where its loader put them, which
// only the loader knows: profile reads what it wrote. Every access model
// of a library's thread-local leaves a dynamic relocation of a GOT slot
// that the loader fills in when it maps the library:
//
//   - initial-exec: TPOFF64 (arm64: TLS_TPREL64), the variable's offset
//     from the thread pointer (the library is in the static TLS block);
//   - TLSDESC (gnu2; arm64's default): a descriptor {function, argument}
//     whose argument is that offset for a library in static TLS, else a
//     pointer to {module, offset} (glibc and musl alike);
//   - general- and local-dynamic: DTPMOD64, the library's module id.
//
// An offset from the thread pointer is read by the program as for the
// executable's thread-locals (LocTP); a module id, through the sampled
// thread's dynamic thread vector (LocDTV), whose layout is the C
// library's (dtvLayout).

type tlsKind uint8

const (
	tlsTPOff  tlsKind = iota + 1 // initial-exec
	tlsDesc                      // TLSDESC
	tlsModule                    // general- or local-dynamic
)

// tlsReloc is one dynamic relocation of a thread-local: the GOT slot the
// loader writes (an address in the file) and the thread-local it is of,
// as an offset in its module's TLS block (the symbol's value plus the
// addend; the addend alone for a relocation of the module itself).
type tlsReloc struct {
	kind   tlsKind
	got    uint64
	target uint64
	name   string // the symbol's, "" for the module's own
	local  bool   // of a thread-local the file defines (or of the module)
}

// maxRelocBytes bounds the relocations read from one file, maxTLSRelocs
// the thread-local ones kept (a library has a few dozen).
const (
	maxRelocBytes = 64 << 20
	maxTLSRelocs  = 4096
)

// tlsRelocs reads a file's dynamic relocations of thread-locals, once.
func (f *file) tlsRelocs() ([]tlsReloc, error) {
	if f.tlsRead {
		return f.tls, f.tlsErr
	}
	f.tlsRead = true
	f.tls, f.tlsErr = readTLSRelocs(f.elf)
	return f.tls, f.tlsErr
}

func readTLSRelocs(ef *elf.File) (out []tlsReloc, err error) {
	defer func() {
		if p := recover(); p != nil {
			out, err = nil, fmt.Errorf("unreadable relocations (%v)", p)
		}
	}()
	if ef.Class != elf.ELFCLASS64 || ef.Data != elf.ELFDATA2LSB {
		return nil, fmt.Errorf("not a 64-bit little-endian file")
	}
	kinds := map[uint32]tlsKind{}
	switch ef.Machine {
	case elf.EM_X86_64:
		kinds[uint32(elf.R_X86_64_TPOFF64)] = tlsTPOff
		kinds[uint32(elf.R_X86_64_TLSDESC)] = tlsDesc
		kinds[uint32(elf.R_X86_64_DTPMOD64)] = tlsModule
	case elf.EM_AARCH64:
		kinds[uint32(elf.R_AARCH64_TLS_TPREL64)] = tlsTPOff
		kinds[uint32(elf.R_AARCH64_TLSDESC)] = tlsDesc
		kinds[uint32(elf.R_AARCH64_TLS_DTPMOD64)] = tlsModule
	default:
		return nil, fmt.Errorf("thread-locals of %v libraries are not read", ef.Machine)
	}
	var syms []elf.Symbol
	symsRead := false
	total := uint64(0)
	for _, s := range ef.Sections {
		if s.Type != elf.SHT_RELA || s.Flags&elf.SHF_ALLOC == 0 || int(s.Link) >= len(ef.Sections) || ef.Sections[s.Link].Type != elf.SHT_DYNSYM {
			continue
		}
		if total += s.Size; total > maxRelocBytes {
			return nil, fmt.Errorf("more than %d MB of relocations", maxRelocBytes>>20)
		}
		r := bufio.NewReader(s.Open())
		var e [24]byte
		for n := s.Size / 24; n > 0; n-- {
			if _, err := io.ReadFull(r, e[:]); err != nil {
				return nil, fmt.Errorf("section %s: %v", s.Name, err)
			}
			info := binary.LittleEndian.Uint64(e[8:])
			kind, ok := kinds[uint32(info)]
			if !ok {
				continue
			}
			rel := tlsReloc{kind: kind, got: binary.LittleEndian.Uint64(e[:]), target: binary.LittleEndian.Uint64(e[16:]), local: true}
			if i := info >> 32; i != 0 {
				if !symsRead {
					syms, _ = ef.DynamicSymbols()
					symsRead = true
				}
				if i > uint64(len(syms)) {
					continue
				}
				sym := syms[i-1]
				rel.name, _, _ = strings.Cut(sym.Name, "@")
				rel.local = sym.Section != elf.SHN_UNDEF && elf.ST_TYPE(sym.Info) == elf.STT_TLS
				if rel.local {
					rel.target += sym.Value
				}
			}
			if out = append(out, rel); len(out) == maxTLSRelocs {
				return out, nil
			}
		}
	}
	return out, nil
}

// dtvLayout is where a C library keeps a thread's DTV: the pointer to it
// at the thread pointer + dtv; the count of its entries at the DTV + count;
// a module's entry (its block's address) at the DTV + module * entry.
type dtvLayout struct {
	name              string
	dtv, count, entry int64
}

// libcOf says whose loader mapped a process's libraries, by the names of
// its mapped files: glibc's (ld-linux*, libc.so.6) or musl's (ld-musl*,
// or any file under a directory of musl's). tcbhead_t holds the DTV at
// tp+8 on x86-64 and tp+0 on arm64 in glibc; its DTV's entries are 16
// bytes, the count of them at [-1]. musl's struct pthread holds it at
// tp+8 on x86-64, tp-8 on arm64 (its last field, below the thread
// pointer); its entries are 8 bytes, the count at [0].
func libcOf(maps []procMapping) (dtvLayout, error) {
	libc := ""
	for _, m := range maps {
		base := filepath.Base(m.Path)
		switch {
		case strings.HasPrefix(base, "ld-musl") || strings.Contains(m.Path, "musl"):
			libc = "musl"
		case strings.HasPrefix(base, "ld-linux") || strings.HasPrefix(base, "libc.so.6"):
			libc = "glibc"
		}
	}
	switch libc + "/" + runtime.GOARCH {
	case "glibc/amd64":
		return dtvLayout{"glibc", 8, -16, 16}, nil
	case "glibc/arm64":
		return dtvLayout{"glibc", 0, -16, 16}, nil
	case "musl/amd64":
		return dtvLayout{"musl", 8, 0, 8}, nil
	case "musl/arm64":
		return dtvLayout{"musl", -8, 0, 8}, nil
	}
	if libc == "" {
		return dtvLayout{}, fmt.Errorf("its C library is neither glibc nor musl (by its files' names): a library's thread-locals cannot be found")
	}
	return dtvLayout{}, fmt.Errorf("thread-locals are read on x86-64 and arm64 only")
}

// errNotYet: the loader has not filled the slot in yet (a library being
// mapped, or a TLSDESC resolved lazily); the next scan tries again.
var errNotYet = fmt.Errorf("not relocated yet")

// maxModule bounds a module id read from a process.
const maxModule = 1 << 16

// libraryTLS places a thread-local that a library (loaded at bias)
// defines at value in its TLS block, through what the process's loader
// wrote for one of the library's own relocations (relocs), the cheapest
// to read at each sample: initial-exec, then TLSDESC, then the module id.
// A library with none is reached through the other files' relocations of
// the symbol by name (others: theirs, at their addresses in the process,
// read only then).
func libraryTLS(mem memory, bias, value uint64, name string, relocs []tlsReloc, others func() []tlsReloc, layout func() (dtvLayout, error)) (prog.LabelLoc, error) {
	var best *tlsReloc
	for i := range relocs {
		// Any of the module's own: initial-exec first, the cheapest read.
		if r := &relocs[i]; r.local && (best == nil || r.kind < best.kind) {
			best = r
		}
	}

	if best == nil {
		all := others()
		for i := range all {
			if r := &all[i]; !r.local && r.name == name && (best == nil || r.kind < best.kind) {
				best = r
			}
		}
		if best == nil {
			return prog.LabelLoc{}, fmt.Errorf("no relocation locates its thread-locals (a library built with -ftls-model=local-exec?)")
		}
		r := *best
		r.target += value // of the symbol another file names: its value here, plus the addend there
		best = &r
		bias = 0 // others' slots are given as addresses in the process
	}
	slot, err := mem.u64(bias + best.got)
	if err != nil {
		return prog.LabelLoc{}, err
	}
	dtv := func(module uint64) (prog.LabelLoc, error) {
		if module == 0 {
			return prog.LabelLoc{}, errNotYet
		}
		if module >= maxModule {
			return prog.LabelLoc{}, fmt.Errorf("a module id of %d", module)
		}
		l, err := layout()
		if err != nil {
			return prog.LabelLoc{}, err
		}
		return prog.LabelLoc{Mode: prog.LocDTV, Module: uint32(module), A: uint64(int64(module) * l.entry), B: value, DTV: l.dtv, Count: l.count}, nil
	}
	tp := func(off uint64) (prog.LabelLoc, error) {
		return prog.LabelLoc{Mode: prog.LocTP, A: off + value - best.target}, nil
	}
	switch best.kind {
	case tlsTPOff:
		if slot == 0 { // never an offset: x86-64's are below the thread pointer, arm64's above its TCB
			return prog.LabelLoc{}, errNotYet
		}
		return tp(slot)
	case tlsDesc:
		if slot == 0 {
			return prog.LabelLoc{}, errNotYet
		}
		arg, err := mem.u64(bias + best.got + 8)
		if err != nil {
			return prog.LabelLoc{}, err
		}
		if off := int64(arg); off > -1<<24 && off < 1<<24 {
			return tp(arg) // static TLS: the offset from the thread pointer
		}
		module, err := mem.u64(arg)
		if err != nil {
			return prog.LabelLoc{}, errNotYet
		}
		off, err := mem.u64(arg + 8)
		if err != nil || off != best.target {
			return prog.LabelLoc{}, errNotYet // not {module, offset}: not resolved yet
		}
		return dtv(module)
	}
	return dtv(slot)
}

// memory is a process's memory, read 8 bytes at a time.
type memory interface {
	u64(addr uint64) (uint64, error)
}

// procMem reads a process's memory, opened on first use.
type procMem struct {
	pid uint32
	f   *os.File
	err error
}

func (m *procMem) u64(addr uint64) (uint64, error) {
	var b [8]byte
	if err := m.read(addr, b[:]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}

// read reads len(b) bytes of the process's memory at addr.
func (m *procMem) read(addr uint64, b []byte) error {
	if m.f == nil && m.err == nil {
		m.f, m.err = os.Open(fmt.Sprintf("/proc/%d/mem", m.pid))
	}
	if m.err != nil {
		return m.err
	}
	if addr > 1<<63 {
		return fmt.Errorf("address %#x", addr)
	}
	if _, err := m.f.ReadAt(b, int64(addr)); err != nil {
		return fmt.Errorf("reading its memory at %#x: %v", addr, err)
	}
	return nil
}

func (m *procMem) Close() {
	if m.f != nil {
		m.f.Close()
	}
}
