package profile

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/tracekit/tracekit/profile/prog"
)

// TestDeferredQueueFull: with the queue full of samples waiting on a file
// still being read (a big table parsed for seconds), a new sample waits
// too, and the oldest is unwound as far as it goes; once a table is there,
// its samples are counted at the next resolve.
func TestDeferredQueueFull(t *testing.T) {
	x86 := &elf.File{FileHeader: elf.FileHeader{Machine: elf.EM_X86_64}}
	big := &file{name: "big", elf: x86, first: -1}     // being read
	small := &file{name: "small", elf: x86, first: -1} // not yet read
	ps := &processes{files: map[fileKey]*file{}, procs: map[uint32]*process{
		1: {maps: []procMapping{{mapping: mapping{Start: 0x1000, End: 0x2000}, file: big}}},
		2: {maps: []procMapping{{mapping: mapping{Start: 0x1000, End: 0x2000}, file: small}}},
	}}
	cfg := prog.Config{UserDepth: 4, KernelDepth: 2}
	d := newDeferrer(cfg)
	sample := func(pid uint32) *deferredSample {
		return &deferredSample{pid: pid, lookup: 0x1100, pc: 0x1100, key: make([]byte, cfg.KeySize()), arrived: time.Now()}
	}
	for range maxDeferred {
		d.queue(ps, sample(1))
	}
	d.queue(ps, sample(2))
	if len(d.pending) != maxDeferred || d.pending[len(d.pending)-1].pid != 2 {
		t.Fatalf("%d pending, the newest of pid %d; want %d, the newest of pid 2", len(d.pending), d.pending[len(d.pending)-1].pid, maxDeferred)
	}
	var counted uint64
	for _, n := range d.counts {
		counted += n
	}
	if counted != 1 {
		t.Errorf("%d samples counted; want 1, the oldest, unwound as far as it goes", counted)
	}
	// The small file is read: it has no table (its sample ends there).
	small.tried, small.err = true, errors.New("no .eh_frame or .debug_frame")
	d.resolve(ps, false)
	if len(d.pending) != maxDeferred-1 {
		t.Errorf("%d pending after the small table came; want %d (pid 2's counted)", len(d.pending), maxDeferred-1)
	}
	for _, s := range d.pending {
		if s.pid != 1 {
			t.Fatalf("a sample of pid %d still pending", s.pid)
		}
	}
}

// TestDeferredPerFile: a file whose table is being read is held after
// maxDeferredPerFile deferred samples (its mappings then say "no rows",
// and the kernel defers no more of them), and no longer once its table
// is read or refused.
func TestDeferredPerFile(t *testing.T) {
	x86 := &elf.File{FileHeader: elf.FileHeader{Machine: elf.EM_X86_64}}
	big := &file{name: "big", elf: x86, first: -1, tried: true} // in the background parse
	ps := &processes{files: map[fileKey]*file{}, procs: map[uint32]*process{
		1: {maps: []procMapping{{mapping: mapping{Start: 0x1000, End: 0x2000}, file: big}}, scanned: time.Now(), every: time.Hour},
	}}
	cfg := prog.Config{UserDepth: 4, KernelDepth: 2}
	d := newDeferrer(cfg)
	raw := make([]byte, cfg.DeferredSize())
	binary.LittleEndian.PutUint32(raw, 1)
	binary.LittleEndian.PutUint64(raw[8:], 0x1100)
	for i := 1; i <= maxDeferredPerFile+10; i++ {
		d.add(ps, raw)
		if want := i >= maxDeferredPerFile; big.held != want {
			t.Fatalf("after %d deferred samples: held %v, want %v", i, big.held, want)
		}
	}
	if len(d.pending) != maxDeferredPerFile+10 {
		t.Errorf("%d pending, want %d: a held file's samples still wait for its table", len(d.pending), maxDeferredPerFile+10)
	}
	ps.loaded(big, nil, errors.New("refused"))
	if big.held {
		t.Error("still held once its table was refused")
	}
}

// TestDeferredRecordLength: a deferred record is as long as its stack
// copy (perf pads it to 8 bytes); a length past the record's end is cut
// to what the record holds, and a record shorter than its header and key
// is not one of ours.
func TestDeferredRecordLength(t *testing.T) {
	ps := &processes{files: map[fileKey]*file{}, procs: map[uint32]*process{
		1: {gone: true}, // no scan: its maps are not read here
	}}
	cfg := prog.Config{UserDepth: 4, KernelDepth: 2}
	base := cfg.DeferredSize() - prog.StackCopy
	record := func(claim, copied, pad int) []byte {
		raw := make([]byte, base+copied+pad)
		binary.LittleEndian.PutUint32(raw, 1)
		binary.LittleEndian.PutUint64(raw[40:], uint64(claim))
		for i := range copied {
			raw[base+i] = byte(i + 1)
		}
		return raw
	}
	for _, c := range []struct{ claim, copied, pad, want int }{
		{300, 300, 4, 300}, // a shallow stack, padded
		{prog.StackCopy, prog.StackCopy, 0, prog.StackCopy}, // a whole copy
		{0, 0, 0, 0},                  // no copy could be read
		{prog.StackCopy, 100, 0, 100}, // claims more than it holds
	} {
		d := newDeferrer(cfg)
		d.add(ps, record(c.claim, c.copied, c.pad))
		if len(d.pending) != 1 {
			t.Fatalf("claim %d, copied %d: %d pending, want 1", c.claim, c.copied, len(d.pending))
		}
		s := d.pending[0].stack
		if len(s) != c.want || c.want > 0 && (s[0] != 1 || s[len(s)-1] != byte(c.want)) {
			t.Errorf("claim %d, copied %d: a copy of %d bytes (%v...), want %d from the record's copy", c.claim, c.copied, len(s), s[:min(len(s), 4)], c.want)
		}
	}
	d := newDeferrer(cfg)
	d.add(ps, make([]byte, base-1))
	if len(d.pending) != 0 {
		t.Errorf("a record of %d bytes, shorter than header and key (%d): taken", base-1, base)
	}
}

// TestHoldReadingOnLoss: when the deferred samples' ring overflows, every
// file whose table is still being read is held (its samples are no longer
// deferred); files with a table, or refused, or not tried yet are not.
func TestHoldReadingOnLoss(t *testing.T) {
	reading := &file{name: "reading", first: -1, tried: true}
	loaded := &file{name: "loaded", first: 0, rows: 16, tried: true}
	refused := &file{name: "refused", first: -1, tried: true, err: errors.New("too big")}
	untried := &file{name: "untried", first: -1}
	ps := &processes{files: map[fileKey]*file{{Inode: 1}: reading, {Inode: 2}: loaded, {Inode: 3}: refused, {Inode: 4}: untried, {Inode: 5}: nil}}
	ps.holdReading()
	for _, f := range []*file{reading, loaded, refused, untried} {
		if want := f == reading; f.held != want {
			t.Errorf("%s: held %v, want %v", f.name, f.held, want)
		}
	}
}
