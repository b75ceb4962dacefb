package stacks

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/tracekit/tracekit/internal/stacktest"
)

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
		syms := pltSymbols(ef)
		var getppid bool
		for _, s := range syms {
			code := make([]byte, 6)
			for _, p := range ef.Progs {
				if p.Type == elf.PT_LOAD && s.value >= p.Vaddr && s.value < p.Vaddr+p.Filesz {
					p.ReadAt(code, int64(s.value-p.Vaddr))
				}
			}
			if code[0] != 0xff || code[1] != 0x25 {
				t.Errorf("%s: %s at 0x%x: code % x, not a jmp *slot(%%rip)", name, s.name, s.value, code)
				continue
			}
			slot := s.value + 6 + uint64(int64(int32(binary.LittleEndian.Uint32(code[2:]))))
			if got := slots[slot] + "@plt"; got != s.name {
				t.Errorf("%s: entry 0x%x jumps through the slot of %s, named %s", name, s.value, got, s.name)
			}
			getppid = getppid || s.name == "getppid@plt"
		}
		if len(syms) < 5 || !getppid {
			t.Errorf("%s: %d PLT names, getppid@plt among them: %v", name, len(syms), getppid)
		}
	}
}

// The signal return trampoline is known by its code: musl's static
// __restore_rt (its .symtab names it), and no address beside it; x86-64's
// code and arm64's.
func TestSigreturnByCode(t *testing.T) {
	stacktest.RequireUnwinder(t)
	path := filepath.Join(stacktest.Fixtures(t), "musl/signal-static")
	stacktest.HaveFixture(t, path)
	ef, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	f := &file{elf: ef, progs: ef.Progs}
	var found int
	for _, s := range symbolsOf(ef) {
		is := f.isSigreturn(s.value)
		if s.name == "__restore_rt" || s.name == "__restore" {
			found++
			if !is || f.isSigreturn(s.value+1) || f.isSigreturn(s.value-1) {
				t.Errorf("%s at 0x%x: %v, beside it %v %v", s.name, s.value, is, f.isSigreturn(s.value-1), f.isSigreturn(s.value+1))
			}
		} else if is && s.value != 0 {
			t.Errorf("%s at 0x%x taken for the trampoline", s.name, s.value)
		}
	}
	if found == 0 {
		t.Errorf("no __restore_rt in %s", path)
	}
}

// Nothing in a file's PLT and relocations, or its code, can crash the
// names made up for them.
func FuzzSynthSymbols(f *testing.F) {
	for _, name := range []string{"signal", "musl/signal"} {
		if b, err := os.ReadFile(filepath.Join(stacktest.Fixtures(f), name)); err == nil {
			f.Add(b, uint64(0x1030))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte, addr uint64) {
		ef, err := newELF(bytes.NewReader(b))
		if err != nil {
			return
		}
		pltSymbols(ef)
		(&file{elf: ef, progs: ef.Progs}).isSigreturn(addr)
	})
}
