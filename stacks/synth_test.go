package stacks

import (
	"bytes"
	"debug/elf"
	"os"
	"path/filepath"
	"testing"

	"github.com/tracekit/tracekit/internal/stacktest"
	"github.com/tracekit/tracekit/symbols"
)

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
	for _, s := range symbols.Functions(ef) {
		is := f.isSigreturn(s.Value)
		if s.Name == "__restore_rt" || s.Name == "__restore" {
			found++
			if !is || f.isSigreturn(s.Value+1) || f.isSigreturn(s.Value-1) {
				t.Errorf("%s at 0x%x: %v, beside it %v %v", s.Name, s.Value, is, f.isSigreturn(s.Value-1), f.isSigreturn(s.Value+1))
			}
		} else if is && s.Value != 0 {
			t.Errorf("%s at 0x%x taken for the trampoline", s.Name, s.Value)
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
		ef, err := symbols.NewELF(bytes.NewReader(b))
		if err != nil {
			return
		}
		symbols.PLT(ef)
		(&file{elf: ef, progs: ef.Progs}).isSigreturn(addr)
	})
}
