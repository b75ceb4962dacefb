package stacks

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/tracekit/tracekit/stacks/prog"
)

// A key packs to its frames and labels and unpacks to the kernel's
// layout, byte for byte; a short key (the first ShortKeySize bytes of a
// key with no user frame past them) packs as its whole key does, so the
// two hashes' counts of one stack add up in one entry; decoding a packed
// key gives its frames.
func TestPackKey(t *testing.T) {
	labels, err := ParseLabels([]string{"a=var:x:int32", "c=tls:x:str"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := prog.Config{KernelDepth: prog.KernelFrames, UserDepth: prog.UserFrames, Context: true}
	for _, l := range labels {
		cfg.Labels = append(cfg.Labels, l.Label)
	}
	if cfg.ShortKeySize() == 0 {
		t.Fatalf("no short keys with %d user frames", cfg.UserDepth)
	}
	key := func(nk, nu int) []byte {
		b := make([]byte, cfg.KeySize())
		binary.LittleEndian.PutUint32(b, 4242)
		b[4], b[6] = 2, 3
		binary.LittleEndian.PutUint32(b[cfg.LabelOffset(0):], 0xfffffffb)
		copy(b[cfg.LabelOffset(1):], "/alpha")
		binary.LittleEndian.PutUint64(b[cfg.ContextOffset():], 77)
		for i := range nk {
			binary.LittleEndian.PutUint64(b[cfg.KernelOffset()+8*i:], 0xffffffff81000000+uint64(i))
		}
		for i := range nu {
			binary.LittleEndian.PutUint64(b[cfg.UserOffset()+8*i:], 0x401000+uint64(i))
		}
		return b
	}
	for _, c := range []struct{ nk, nu int }{{0, 0}, {3, 10}, {64, 64}, {12, 65}, {64, 256}} {
		b := key(c.nk, c.nu)
		k := packKey(b, cfg)
		if got := k.raw(cfg); !bytes.Equal(got, b) {
			t.Errorf("%d kernel, %d user frames: unpacked key differs from the kernel's", c.nk, c.nu)
		}
		if want := 12 + cfg.KernelOffset() - 8 + 8*(c.nk+c.nu); len(k) != want {
			t.Errorf("%d kernel, %d user frames: packed to %d bytes, want %d", c.nk, c.nu, len(k), want)
		}
		if c.nu <= prog.ShortUserFrames {
			if short := packKey(b[:cfg.ShortKeySize()], cfg); short != k {
				t.Errorf("%d kernel, %d user frames: the short key packs differently from the whole key", c.nk, c.nu)
			}
		}
		d := k.decode(cfg)
		if d.Pid != 4242 || d.Stop != 2 || len(d.Kernel) != c.nk || len(d.User) != c.nu {
			t.Errorf("%d kernel, %d user frames: decoded pid %d, stop %d, %d kernel and %d user frames", c.nk, c.nu, d.Pid, d.Stop, len(d.Kernel), len(d.User))
		}
		if c.nu > 0 && (d.User[0] != 0x401000 || d.User[c.nu-1] != 0x401000+uint64(c.nu-1)) {
			t.Errorf("%d kernel, %d user frames: user frames %#x", c.nk, c.nu, d.User)
		}
		if got := labelsName(decodeLabels(labels, cfg, k.raw(cfg))); got != `a="-5" c="/alpha" ` {
			t.Errorf("%d kernel, %d user frames: labels %q", c.nk, c.nu, got)
		}
	}
	// Malformed packed keys (never the kernel's) unpack without a panic.
	for _, p := range []string{"", "abc", "0123456789ab", string(make([]byte, 40))} {
		_ = stackKey(p).raw(cfg)
		_ = stackKey(p).decode(cfg)
	}
}
