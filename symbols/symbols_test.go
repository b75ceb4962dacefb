package symbols

import (
	"bytes"
	"cmp"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"github.com/tracekit/tracekit/internal/stacktest"
)

func TestDemangle(t *testing.T) {
	for _, c := range []struct{ in, full, short string }{
		{"_ZN3foo3barEv", "foo::bar()", "foo::bar"},
		{"_Z1fi", "f(int)", "f"},
		{"_Z1fd", "f(double)", "f"},
		{"_Z4tmplIiEvT_", "void tmpl<int>(int)", "tmpl"},
		{"_ZNSt6vectorIiSaIiEE9push_backERKi", "std::vector<int, std::allocator<int> >::push_back(int const&)", "std::vector::push_back"},
		{"malloc", "malloc", "malloc"},
		{"_RNvCs1234_5crate4func", "crate::func", "crate::func"},
		{"_Z", "_Z", "_Z"}, // not a mangled name: as it is
	} {
		if got := Demangle(c.in, false); got != c.full {
			t.Errorf("Demangle(%q) = %q, want %q", c.in, got, c.full)
		}
		if got := Demangle(c.in, true); got != c.short {
			t.Errorf("Demangle(%q, short) = %q, want %q", c.in, got, c.short)
		}
	}
}

// TestSortByAddress: SortByAddress orders as a stable sort by address.
func TestSortByAddress(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for _, n := range []int{0, 1, 2, 3, 17, 100, 5000} {
		syms := make([]Symbol, n)
		for i := range syms {
			syms[i] = Symbol{Name: fmt.Sprint(i), Value: uint64(rng.Intn(n/3 + 1))}
		}
		want := slices.Clone(syms)
		slices.SortStableFunc(want, func(a, b Symbol) int { return cmp.Compare(a.Value, b.Value) })
		SortByAddress(syms)
		if !slices.Equal(syms, want) {
			t.Errorf("%d symbols: not the stable order", n)
		}
	}
}

// Nothing in a Go program's .gopclntab can crash the names' reader. The
// seeds: the fixture's table, its first 4 KiB (a table cut short), and
// its header alone.
func FuzzGoSymbols(f *testing.F) {
	if ef, err := elf.Open(filepath.Join(stacktest.Fixtures(f), "gospin")); err == nil {
		if b, err := ef.Section(".gopclntab").Data(); err == nil {
			text := ef.Section(".text").Addr
			if len(pclntabSymbols(b, text)) < 100 {
				f.Fatal("gospin's .gopclntab names fewer than 100 functions")
			}
			f.Add(b, text)
			f.Add(b[:4096], text)
			f.Add(b[:64], text)
		}
		ef.Close()
	}
	f.Fuzz(func(t *testing.T, b []byte, text uint64) {
		pclntabSymbols(b, text)
	})
}

// The PLT entries' names: each x86-64 entry's jump (ff 25 disp32) reads
// the GOT slot that .rela.plt relocates for the function it is named
// after. On the signal fixture, glibc's and musl's builds.
func TestPLTSymbols(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("decodes x86-64's PLT entries; on arm64 TestSignalFrames' plt case checks a PLT name (getppid@plt)")
	}
	dir := stacktest.Fixtures(t)
	for _, name := range []string{"signal", "musl/signal"} {
		path := filepath.Join(dir, name)
		stacktest.HaveFixture(t, path)
		ef, err := elf.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer ef.Close()
		slots := map[uint64]string{} // GOT slot -> the function relocated there
		rela := ef.Section(".rela.plt")
		data, err := rela.Data()
		if err != nil {
			t.Fatal(err)
		}
		dyn, _ := ef.DynamicSymbols()
		for i := 0; i+24 <= len(data); i += 24 {
			if sym := binary.LittleEndian.Uint64(data[i+8:]) >> 32; sym > 0 {
				slots[binary.LittleEndian.Uint64(data[i:])] = dyn[sym-1].Name
			}
		}
		syms := PLT(ef)
		var getppid bool
		for _, s := range syms {
			code := make([]byte, 6)
			for _, p := range ef.Progs {
				if p.Type == elf.PT_LOAD && s.Value >= p.Vaddr && s.Value < p.Vaddr+p.Filesz {
					p.ReadAt(code, int64(s.Value-p.Vaddr))
				}
			}
			if code[0] != 0xff || code[1] != 0x25 {
				t.Errorf("%s: %s at 0x%x: code % x, not a jmp *slot(%%rip)", name, s.Name, s.Value, code)
				continue
			}
			slot := s.Value + 6 + uint64(int64(int32(binary.LittleEndian.Uint32(code[2:]))))
			if got := slots[slot] + "@plt"; got != s.Name {
				t.Errorf("%s: entry 0x%x jumps through the slot of %s, named %s", name, s.Value, got, s.Name)
			}
			getppid = getppid || s.Name == "getppid@plt"
		}
		if len(syms) < 5 || !getppid {
			t.Errorf("%s: %d PLT names, getppid@plt among them: %v", name, len(syms), getppid)
		}
	}
}

// symbolRecords lists a file's symbols as Each gives them, and as
// debug/elf's Symbols and DynamicSymbols do.
func symbolRecords(ef *elf.File) (got, want []Raw) {
	Each(ef, func(s Raw) { got = append(got, s) })
	for _, read := range []func() ([]elf.Symbol, error){ef.Symbols, ef.DynamicSymbols} {
		all, _ := read()
		for i, s := range all {
			want = append(want, Raw{Index: i + 1, Name: s.Name, Info: s.Info, Other: s.Other, Section: s.Section, Value: s.Value, Size: s.Size})
		}
	}
	return got, want
}

// Each gives every symbol debug/elf does, in its order, for the
// fixtures (64-bit, and 32-bit ARM's where built), libc, and this test
// binary (a Go program: .symtab only).
func TestEachSymbol(t *testing.T) {
	paths := []string{os.Args[0], "/lib/x86_64-linux-gnu/libc.so.6", "/lib/aarch64-linux-gnu/libc.so.6"}
	for _, name := range []string{"chain-lib", "libchain.so", "signal", "gospin", "musl/signal"} {
		paths = append(paths, filepath.Join(stacktest.Fixtures(t), name))
	}
	read := 0
	for _, p := range paths {
		ef, err := elf.Open(p)
		if err != nil {
			continue
		}
		got, want := symbolRecords(ef)
		ef.Close()
		if !slices.Equal(got, want) {
			t.Errorf("%s: %d symbols, debug/elf %d, or others", p, len(got), len(want))
		}
		if len(got) > 0 {
			read++
		}
	}
	if read < 3 {
		t.Fatalf("symbols read from %d files, want at least 3", read)
	}
}

// Nothing in a symbol table can crash the reader, nor make it read past
// the string table.
func FuzzEachSymbol(f *testing.F) {
	for _, name := range []string{"libchain.so", "signal"} {
		if b, err := os.ReadFile(filepath.Join(stacktest.Fixtures(f), name)); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ef, err := NewELF(bytes.NewReader(b))
		if err != nil {
			return
		}
		n := 0
		Each(ef, func(s Raw) {
			if len(s.Name) > len(b) {
				t.Fatalf("a name of %d bytes from a file of %d", len(s.Name), len(b))
			}
			n++
		})
		Functions(ef)
	})
}

// Merge keeps the symbols it has at their addresses, adds the
// first of more at each other address, and keeps them sorted.
func TestMergeSymbols(t *testing.T) {
	syms := []Symbol{{Name: "a", Value: 0x10}, {Name: "b", Value: 0x20}}
	more := []Symbol{{Name: "c", Value: 0x30}, {Name: "d", Value: 0x10}, {Name: "e", Value: 0x05}, {Name: "f", Value: 0x30}, {Name: "g", Value: 0x18}}
	got := Merge(syms, more)
	want := []Symbol{{Name: "e", Value: 0x05}, {Name: "a", Value: 0x10}, {Name: "g", Value: 0x18}, {Name: "b", Value: 0x20}, {Name: "c", Value: 0x30}}
	if !slices.Equal(got, want) {
		t.Errorf("merged: %v, want %v", got, want)
	}
	if got := Merge(syms, nil); !slices.Equal(got, syms) {
		t.Errorf("nothing merged: %v", got)
	}
}
