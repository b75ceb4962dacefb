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
	"github.com/tracekit/tracekit/stacks/prog"
	"github.com/tracekit/tracekit/symbols"
)

// decodeLabels reads integers by their size and sign, strings up to their
// terminator, and leaves out the labels whose bit is clear.
func TestDecodeLabels(t *testing.T) {
	labels, err := ParseLabels([]string{"a=var:x:int32", "b=var:x:uint8", "c=tls:x:str", "d=var:x:int"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := prog.Config{KernelDepth: 2, UserDepth: 3}
	for _, l := range labels {
		cfg.Labels = append(cfg.Labels, l.Label)
	}
	key := make([]byte, cfg.KeySize())
	key[6] = 1<<0 | 1<<1 | 1<<2 // d unset
	binary.LittleEndian.PutUint64(key[cfg.LabelOffset(0):], 0xdeadbeef_fffffffb)
	binary.LittleEndian.PutUint64(key[cfg.LabelOffset(1):], 0x1234_56c8)
	copy(key[cfg.LabelOffset(2):], "/alpha\x00junk")
	binary.LittleEndian.PutUint64(key[cfg.LabelOffset(3):], 7)
	got := labelsName(decodeLabels(labels, cfg, key))
	if want := `a="-5" b="200" c="/alpha" `; got != want {
		t.Errorf("labels %s, want %s", got, want)
	}
}

// The executable's thread-locals sit below the thread pointer on x86-64,
// the block rounded up to its alignment, and above a 16-byte TCB on arm64.
func TestTPOffset(t *testing.T) {
	if _, ok := map[string]bool{"amd64": true, "arm64": true}[runtime.GOARCH]; !ok {
		t.Skipf("%s: thread-locals are placed for x86-64's and arm64's TLS layouts", runtime.GOARCH)
	}
	ef := &elf.File{Progs: []*elf.Prog{{ProgHeader: elf.ProgHeader{Type: elf.PT_TLS, Vaddr: 0x3de8, Memsz: 0x24, Align: 8}}}}
	got, err := tpOffset(ef, 0x10)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"amd64": 0x10 - 0x28, "arm64": 16 + 0x10}[runtime.GOARCH]
	if got != want {
		t.Errorf("offset %#x, want %#x", got, want)
	}
	if _, err := tpOffset(&elf.File{}, 0); err == nil {
		t.Error("no PT_TLS: no error")
	}
}

// A strobe map's slot gives NAME.id, NAME.tag when it has one, and
// NAME.KEY per entry with a key, the first of a key given twice.
func TestStrobeMapLabels(t *testing.T) {
	b := make([]byte, prog.StrobeMapSlot)
	binary.LittleEndian.PutUint64(b, uint64(0xffffffffffffffff))
	const n = prog.StrobeMapStrLen
	entry := func(e int, key, val string) {
		clear(b[8+n+2*n*e : 8+n+2*n*(e+1)])
		copy(b[8+n+2*n*e:], key)
		copy(b[8+n+2*n*e+n:], val)
	}
	entry(0, "ep", "/alpha")
	entry(1, "", "lost")
	entry(2, "ep", "/second")
	got := labelsName(strobeMapLabels("m", b))
	if want := `m.id="-1" m.ep="/alpha" `; got != want {
		t.Errorf("labels %s, want %s", got, want)
	}
	copy(b[8:], "tag1")
	entry(1, "tenant", "t-a")
	got = labelsName(strobeMapLabels("m", b))
	if want := `m.id="-1" m.tag="tag1" m.ep="/alpha" m.tenant="t-a" `; got != want {
		t.Errorf("labels %s, want %s", got, want)
	}
}

// Nothing in a symbol table can crash the index of --label's symbols.
func FuzzIndexSymbols(f *testing.F) {
	for _, name := range []string{"tls", "libtkgd.so"} {
		if b, err := os.ReadFile(filepath.Join(stacktest.Fixtures(f), name)); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ef, err := symbols.NewELF(bytes.NewReader(b))
		if err != nil {
			return
		}
		indexSymbols(ef, map[string]bool{"main": true, "tk_req": true})
	})
}
