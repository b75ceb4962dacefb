package stacks

import (
	"bytes"
	"debug/elf"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/tracekit/tracekit/internal/stacktest"
)

// symbolRecords lists a file's symbols as eachSymbol gives them, and as
// debug/elf's Symbols and DynamicSymbols do.
func symbolRecords(ef *elf.File) (got, want []elfSym) {
	eachSymbol(ef, func(s elfSym) { got = append(got, s) })
	for _, read := range []func() ([]elf.Symbol, error){ef.Symbols, ef.DynamicSymbols} {
		all, _ := read()
		for i, s := range all {
			want = append(want, elfSym{index: i + 1, name: s.Name, info: s.Info, other: s.Other, section: s.Section, value: s.Value, size: s.Size})
		}
	}
	return got, want
}

// eachSymbol gives every symbol debug/elf does, in its order, for the
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
		ef, err := newELF(bytes.NewReader(b))
		if err != nil {
			return
		}
		n := 0
		eachSymbol(ef, func(s elfSym) {
			if len(s.name) > len(b) {
				t.Fatalf("a name of %d bytes from a file of %d", len(s.name), len(b))
			}
			n++
		})
		symbolsOf(ef)
		indexSymbols(ef, map[string]bool{"main": true})
	})
}

// mergeSymbols keeps the symbols it has at their addresses, adds the
// first of more at each other address, and keeps them sorted.
func TestMergeSymbols(t *testing.T) {
	syms := []symbol{{name: "a", value: 0x10}, {name: "b", value: 0x20}}
	more := []symbol{{name: "c", value: 0x30}, {name: "d", value: 0x10}, {name: "e", value: 0x05}, {name: "f", value: 0x30}, {name: "g", value: 0x18}}
	got := mergeSymbols(syms, more)
	want := []symbol{{name: "e", value: 0x05}, {name: "a", value: 0x10}, {name: "g", value: 0x18}, {name: "b", value: 0x20}, {name: "c", value: 0x30}}
	if !slices.Equal(got, want) {
		t.Errorf("merged: %v, want %v", got, want)
	}
	if got := mergeSymbols(syms, nil); !slices.Equal(got, syms) {
		t.Errorf("nothing merged: %v", got)
	}
}
