package stacks

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tracekit/tracekit/internal/stacktest"
	"github.com/tracekit/tracekit/symbols"

	"github.com/tracekit/tracekit/stacks/prog"
)

// The fixture libraries' relocations of thread-locals are those of their
// access model, of the symbols (and values) their symbol tables give.
func TestTLSRelocs(t *testing.T) {
	stacktest.RequireThreadPointer(t)
	dir := stacktest.Fixtures(t)
	for _, c := range []struct {
		lib  string
		kind tlsKind
	}{{"libtkgd.so", tlsModule}, {"libtkie.so", tlsTPOff}, {"libtkdesc.so", tlsDesc}} {
		ef, err := elf.Open(filepath.Join(dir, c.lib))
		if err != nil {
			t.Fatal(err)
		}
		defer ef.Close()
		relocs, err := readTLSRelocs(ef)
		if err != nil {
			t.Fatalf("%s: %v", c.lib, err)
		}
		sym := "tk_" + c.lib[len("libtk"):len(c.lib)-len(".so")] + "_req"
		var value uint64
		syms, _ := ef.DynamicSymbols()
		for _, s := range syms {
			if s.Name == sym {
				value = s.Value
			}
		}
		var named, module bool
		for _, r := range relocs {
			if r.kind != c.kind || !r.local {
				t.Errorf("%s: %+v: want a %d of its own", c.lib, r, c.kind)
			}
			named = named || r.name == sym && r.target == value
			module = module || r.name == ""
		}
		if !named || !module {
			t.Errorf("%s: %+v: want one of %s (at %#x) and one of the module (its static thread-locals)", c.lib, relocs, sym, value)
		}
	}
}

// fakeMemory is a process's memory as 8-byte words.
type fakeMemory map[uint64]uint64

func (m fakeMemory) u64(addr uint64) (uint64, error) {
	v, ok := m[addr]
	if !ok {
		return 0, fmt.Errorf("unmapped %#x", addr)
	}
	return v, nil
}

// What the loader wrote decides the location: an offset from the thread
// pointer (initial-exec, a static TLSDESC), a module read through the
// DTV (a module id, a dynamic TLSDESC's {module, offset}); a slot not
// filled in yet is errNotYet, never a location.
func TestLibraryTLS(t *testing.T) {
	glibc := func() (dtvLayout, error) { return dtvLayout{"glibc", 8, -16, 16}, nil }
	const bias, value = 0x7f0000000000, 0x18
	neg := func(n int64) uint64 { return uint64(n) }
	for _, c := range []struct {
		name   string
		relocs []tlsReloc
		others []tlsReloc
		mem    fakeMemory
		want   prog.LabelLoc
		err    string
	}{
		{"initial-exec", []tlsReloc{{kind: tlsModule, got: 0x3fd0, target: 0x8, local: true}, {kind: tlsTPOff, got: 0x3fd8, target: 0x8, local: true}},
			nil, fakeMemory{bias + 0x3fd8: neg(-0x48), bias + 0x3fd0: 3},
			prog.LabelLoc{Mode: prog.LocTP, A: neg(-0x48 + value - 0x8)}, ""},
		{"initial-exec not yet", []tlsReloc{{kind: tlsTPOff, got: 0x3fd8, local: true}}, nil, fakeMemory{bias + 0x3fd8: 0}, prog.LabelLoc{}, errNotYet.Error()},
		{"module", []tlsReloc{{kind: tlsModule, got: 0x3fa8, local: true}}, nil, fakeMemory{bias + 0x3fa8: 3},
			prog.LabelLoc{Mode: prog.LocDTV, Module: 3, A: 3 * 16, B: value, DTV: 8, Count: -16}, ""},
		{"module not yet", []tlsReloc{{kind: tlsModule, got: 0x3fa8, local: true}}, nil, fakeMemory{bias + 0x3fa8: 0}, prog.LabelLoc{}, errNotYet.Error()},
		{"module id too big", []tlsReloc{{kind: tlsModule, got: 0x3fa8, local: true}}, nil, fakeMemory{bias + 0x3fa8: 1 << 40}, prog.LabelLoc{}, "a module id of"},
		{"tlsdesc static", []tlsReloc{{kind: tlsDesc, got: 0x4000, target: 0, local: true}}, nil,
			fakeMemory{bias + 0x4000: 0x7f00deadbeef, bias + 0x4008: neg(-0x60)},
			prog.LabelLoc{Mode: prog.LocTP, A: neg(-0x60 + value)}, ""},
		{"tlsdesc dynamic", []tlsReloc{{kind: tlsDesc, got: 0x4000, target: 0x8, local: true}}, nil,
			fakeMemory{bias + 0x4000: 0x7f00deadbeef, bias + 0x4008: 0x5555000010, 0x5555000010: 4, 0x5555000018: 0x8},
			prog.LabelLoc{Mode: prog.LocDTV, Module: 4, A: 4 * 16, B: value, DTV: 8, Count: -16}, ""},
		{"tlsdesc lazy", []tlsReloc{{kind: tlsDesc, got: 0x4000, target: 0x8, local: true}}, nil,
			fakeMemory{bias + 0x4000: 0x7f00deadbeef, bias + 0x4008: 0x5555000010, 0x5555000010: 0x4000, 0x5555000018: 0x24},
			prog.LabelLoc{}, errNotYet.Error()},
		{"another file's", []tlsReloc{{kind: tlsModule, got: 0x3fa8, name: "tk_x", local: false}},
			[]tlsReloc{{kind: tlsTPOff, got: 0x55550000, name: "tk_req", target: 0x4}}, fakeMemory{0x55550000: neg(-0x100)},
			prog.LabelLoc{Mode: prog.LocTP, A: neg(-0x100 - 0x4)}, ""},
		{"none", nil, []tlsReloc{{kind: tlsTPOff, got: 0x55550000, name: "tk_other"}}, fakeMemory{}, prog.LabelLoc{}, "no relocation locates"},
	} {
		got, err := libraryTLS(c.mem, bias, value, "tk_req", c.relocs, func() []tlsReloc { return c.others }, glibc)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: %+v, %v; want an error %q", c.name, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%s: %+v, %v; want %+v", c.name, got, err, c.want)
		}
	}
}

// Nothing in a file's relocations can crash the reader.
func FuzzTLSRelocs(f *testing.F) {
	if b, err := os.ReadFile(filepath.Join(stacktest.Fixtures(f), "libtkgd.so")); err == nil {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if ef, err := symbols.NewELF(bytes.NewReader(b)); err == nil {
			readTLSRelocs(ef)
		}
	})
}
