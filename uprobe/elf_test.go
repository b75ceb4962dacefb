package uprobe

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Opening a file that is not ELF is an error that says so.
func TestOpenNotELF(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x")
	os.WriteFile(p, []byte("#!/bin/sh\necho hi\n"), 0o755)
	if _, err := Open(p); err == nil || !strings.Contains(err.Error(), "is not an ELF file") {
		t.Errorf("a script: %v", err)
	}
}

// This test binary is an ELF file with symbols and no USDT notes.
func TestOpenSelf(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f, err := Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if probes, err := f.USDT(); err != nil || len(probes) != 0 {
		t.Errorf("USDT: %v %v", probes, err)
	}
	sym, err := f.Function("main.main")
	if err != nil {
		// go test may strip the symbol table.
		t.Logf("main.main: %v", err)
		return
	}
	if off, err := f.Offset(sym.Value); err != nil || off == 0 || off > sym.Value {
		t.Errorf("main.main at 0x%x: file offset 0x%x, %v", sym.Value, off, err)
	}
}

// Whatever the bytes, reading them as ELF ends in an error or a result,
// never a panic.
func FuzzOpen(f *testing.F) {
	if self, err := os.Executable(); err == nil {
		if b, err := os.ReadFile(self); err == nil {
			f.Add(b[:min(len(b), 1<<16)])
		}
	}
	f.Add([]byte("\x7fELF\x02\x01\x01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(t.TempDir(), "f")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		file, err := Open(p)
		if err != nil {
			return
		}
		defer file.Close()
		file.USDT()
		file.Functions()
		file.Glob("m*")
		file.Offset(0x1000)
		file.FindUSDT("", "x")
	})
}

// 32-bit ARM's uprobes take ARM instructions only: a Thumb function is
// refused by its symbol's low bit, an aligned address in Thumb code by
// the mapping symbol ($t) before it; ARM code is probed.
func TestCodeOffsetARMModes(t *testing.T) {
	f, err := Open("testdata/arm-modes.elf")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	arm, err := f.Function("tk_arm")
	if err != nil {
		t.Fatal(err)
	}
	if off, err := f.CodeOffset(arm.Value); err != nil || off != 0x7c {
		t.Errorf("tk_arm at 0x%x: offset 0x%x, %v; want 0x7c", arm.Value, off, err)
	}
	thumb, err := f.Function("tk_thumb")
	if err != nil {
		t.Fatal(err)
	}
	for _, addr := range []uint64{thumb.Value, thumb.Value &^ 1, thumb.Value + 3, 0x10088} {
		if _, err := f.CodeOffset(addr); err == nil || !strings.Contains(err.Error(), "is Thumb code") || !strings.Contains(err.Error(), "-marm") {
			t.Errorf("0x%x: %v; want Thumb code refused", addr, err)
		}
	}
}
