// Package uprobe finds where user-space probes go in a file: function
// symbols, USDT probes (the .note.stapsdt notes sys/sdt.h leaves, and
// their argument specs), and the file offsets uprobes take. Everything it
// reads comes from files it does not trust: malformed input is an error,
// never a panic.
package uprobe

import (
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/tracekit/tracekit/internal/regular"
)

// File is an ELF file opened for probing.
type File struct {
	Path  string
	elf   *elf.File
	osf   *os.File
	modes *armModes // a 32-bit ARM file's instruction sets, read at the first need
}

// Open opens an ELF file, a regular file only (a FIFO in its place never
// blocks: see internal/regular). debug/elf has panicked on malformed files
// in the past: a panic is an error here.
func Open(path string) (f *File, err error) {
	osf, err := regular.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() {
		if r := recover(); r != nil {
			osf.Close()
			f, err = nil, fmt.Errorf("%s: malformed ELF file (%v)", path, r)
		}
	}()
	ef, err := elf.NewFile(osf)
	if err != nil {
		osf.Close()
		var fe *elf.FormatError
		if errors.As(err, &fe) {
			return nil, fmt.Errorf("%s is not an ELF file: %w", path, err)
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &File{Path: path, elf: ef, osf: osf}, nil
}

// NoSuchError is a name the file lacks (a function, a USDT probe), or one
// that matches several: the caller named it wrong, unlike a file that
// cannot be read or is no valid ELF file.
type NoSuchError struct{ msg string }

func (e *NoSuchError) Error() string { return e.msg }

// NoSuch is a NoSuchError of that message.
func NoSuch(format string, args ...any) error {
	return &NoSuchError{fmt.Sprintf(format, args...)}
}

// Misnamed says whether err is the caller's naming (a NoSuchError, a
// file that is not there), not a file that cannot be read: a usage error
// where a tool turns it into an exit status.
func Misnamed(err error) bool {
	var ns *NoSuchError
	return errors.As(err, &ns) || errors.Is(err, fs.ErrNotExist)
}

// Close closes the file.
func (f *File) Close() error { return f.osf.Close() }

// Machine is the file's architecture.
func (f *File) Machine() elf.Machine { return f.elf.Machine }

// Offset converts a virtual address to the file offset a uprobe takes,
// through the PT_LOAD segment that holds it.
func (f *File) Offset(vaddr uint64) (uint64, error) {
	for _, p := range f.elf.Progs {
		if p.Type != elf.PT_LOAD || vaddr < p.Vaddr || vaddr-p.Vaddr >= p.Memsz {
			continue
		}
		if vaddr-p.Vaddr >= p.Filesz {
			// .bss: no file bytes (a semaphore is never there: sys/sdt.h
			// puts it in .probes, which is initialised data).
			return 0, fmt.Errorf("%s: address 0x%x has no bytes in the file", f.Path, vaddr)
		}
		return vaddr - p.Vaddr + p.Off, nil
	}
	return 0, fmt.Errorf("%s: address 0x%x is in no loaded segment", f.Path, vaddr)
}

// CodeOffset is Offset of an address a uprobe goes at, which Probeable
// checks first.
func (f *File) CodeOffset(vaddr uint64) (uint64, error) {
	if err := f.Probeable(vaddr); err != nil {
		return 0, err
	}
	return f.Offset(vaddr)
}

// Probeable says whether a uprobe can go at an address. On 32-bit ARM the
// kernel's uprobes decode ARM instructions only (arch_uprobe_analyze_insn
// refuses an address not 4-byte aligned, "Thumb not yet supported"), and a
// breakpoint at an aligned address in Thumb code would break the process:
// Thumb code is refused, known by the address's low bits, the file's
// mapping symbols ($t, $a) or the function symbol that holds it.
func (f *File) Probeable(vaddr uint64) error {
	if f.elf.Machine == elf.EM_ARM && (vaddr&3 != 0 || f.thumb(vaddr)) {
		return fmt.Errorf("%s: 0x%x is Thumb code, and 32-bit ARM's uprobes probe ARM instructions only: build the program with -marm", f.Path, vaddr&^1)
	}
	return nil
}

// thumb reports an ARM file's address in Thumb code: the nearest mapping
// symbol at or below it is $t, or else (a file without them) the function
// symbol around it has its low bit set.
func (f *File) thumb(vaddr uint64) bool {
	if f.modes == nil {
		f.modes = f.readModes()
	}
	m := f.modes
	i := sort.Search(len(m.mapping), func(i int) bool { return m.mapping[i].addr > vaddr })
	if i > 0 {
		return m.mapping[i-1].thumb
	}
	for _, fn := range m.funcs {
		if fn.addr <= vaddr && vaddr < fn.addr+fn.size {
			return fn.thumb
		}
	}
	return false
}

// armModes are an ARM file's mapping symbols ($a, $t), sorted by address,
// and its function symbols, each with its instruction set.
type armModes struct {
	mapping []armMode
	funcs   []armMode
}

type armMode struct {
	addr, size uint64
	thumb      bool
}

func (f *File) readModes() (m *armModes) {
	m = &armModes{}
	defer func() {
		if recover() != nil {
			m = &armModes{}
		}
	}()
	syms, _ := f.elf.Symbols()
	for _, s := range syms {
		if s.Name == "$t" || s.Name == "$a" || strings.HasPrefix(s.Name, "$t.") || strings.HasPrefix(s.Name, "$a.") {
			m.mapping = append(m.mapping, armMode{addr: s.Value, thumb: s.Name[1] == 't'})
		}
	}
	sort.SliceStable(m.mapping, func(i, j int) bool { return m.mapping[i].addr < m.mapping[j].addr })
	dyn, _ := f.elf.DynamicSymbols()
	for _, s := range append(syms, dyn...) {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC {
			m.funcs = append(m.funcs, armMode{addr: s.Value &^ 1, size: s.Size, thumb: s.Value&1 != 0})
		}
	}
	return m
}

// Sym is a function symbol.
type Sym struct {
	Name        string
	Value, Size uint64
}

// Functions lists the file's function symbols (.symtab, else .dynsym),
// sorted by name, each name once.
func (f *File) Functions() (syms []Sym, err error) {
	defer func() {
		if r := recover(); r != nil {
			syms, err = nil, fmt.Errorf("%s: malformed symbol table (%v)", f.Path, r)
		}
	}()
	seen := map[string]bool{}
	for _, read := range []func() ([]elf.Symbol, error){f.elf.Symbols, f.elf.DynamicSymbols} {
		all, err := read()
		if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
			return nil, fmt.Errorf("%s: %w", f.Path, err)
		}
		for _, s := range all {
			if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Value == 0 || s.Section == elf.SHN_UNDEF || seen[s.Name] {
				continue
			}
			// A versioned dynamic name ("malloc@@GLIBC_2.2.5") is found by its name.
			name, _, _ := strings.Cut(s.Name, "@")
			seen[s.Name], seen[name] = true, true
			syms = append(syms, Sym{Name: name, Value: s.Value, Size: s.Size})
		}
	}
	sort.Slice(syms, func(i, j int) bool { return syms[i].Name < syms[j].Name })
	return syms, nil
}

// Function finds a function symbol; a miss lists near names.
func (f *File) Function(name string) (Sym, error) {
	syms, err := f.Functions()
	if err != nil {
		return Sym{}, err
	}
	for _, s := range syms {
		if s.Name == name {
			return s, nil
		}
	}
	var near []string
	for _, s := range syms {
		if strings.Contains(s.Name, name) || strings.Contains(name, s.Name) && len(s.Name) > 3 {
			near = append(near, s.Name)
		}
	}
	hint := ""
	if len(near) > 0 {
		if len(near) > 8 {
			near = append(near[:8], "...")
		}
		hint = " (near: " + strings.Join(near, ", ") + ")"
	}
	if len(syms) == 0 {
		hint = " (the file has no symbol table)"
	}
	return Sym{}, NoSuch("%s has no function %q%s", f.Path, name, hint)
}

// Glob lists the function symbols matching a shell pattern ("" for all).
func (f *File) Glob(pattern string) ([]Sym, error) {
	syms, err := f.Functions()
	if err != nil || pattern == "" {
		return syms, err
	}
	if _, err := filepath.Match(pattern, ""); err != nil {
		return nil, fmt.Errorf("bad pattern %q: %w", pattern, err)
	}
	var out []Sym
	for _, s := range syms {
		if ok, _ := filepath.Match(pattern, s.Name); ok {
			out = append(out, s)
		}
	}
	return out, nil
}

// symbolValue is any symbol's address (a USDT rip-relative global is data,
// not a function).
func (f *File) symbolValue(name string) (uint64, bool) {
	for _, read := range []func() ([]elf.Symbol, error){f.elf.Symbols, f.elf.DynamicSymbols} {
		all, _ := read()
		for _, s := range all {
			if s.Name == name && s.Section != elf.SHN_UNDEF {
				return s.Value, true
			}
		}
	}
	return 0, false
}
