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
