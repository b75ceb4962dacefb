package profile

import (
	"debug/elf"
	"encoding/binary"
	"runtime"
	"testing"

	"github.com/tracekit/tracekit/profile/prog"
)

// decodeLabels reads integers by their size and sign, strings up to their
// terminator, and leaves out the labels whose bit is clear.
func TestDecodeLabels(t *testing.T) {
	labels, err := parseLabels([]string{"a=var:x:int32", "b=var:x:uint8", "c=tls:x:str", "d=var:x:int"})
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
