package stacks

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/perfevent"
	"github.com/tracekit/tracekit/stacks/prog"
	"github.com/tracekit/tracekit/unwind"
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
	small.tried = true
	ps.loaded(small, nil, errors.New("no .eh_frame or .debug_frame"))
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

// TestDeferredPerFile: a big file whose table is being read is held after
// maxDeferredPerFile deferred samples (its mappings then say "no rows",
// and the kernel defers no more of them), and no longer once its table
// is read or refused; a small file is never held.
func TestDeferredPerFile(t *testing.T) {
	x86 := &elf.File{FileHeader: elf.FileHeader{Machine: elf.EM_X86_64}}
	big := &file{name: "big", elf: x86, first: -1, tried: true, big: true} // in the big files' lane
	small := &file{name: "small", elf: x86, first: -1, tried: true}
	ps := &processes{files: map[fileKey]*file{}, procs: map[uint32]*process{
		1: {maps: []procMapping{{mapping: mapping{Start: 0x1000, End: 0x2000}, file: big}}, scanned: time.Now(), every: time.Hour},
		2: {maps: []procMapping{{mapping: mapping{Start: 0x1000, End: 0x2000}, file: small}}, scanned: time.Now(), every: time.Hour},
	}}
	cfg := prog.Config{UserDepth: 4, KernelDepth: 2}
	d := newDeferrer(cfg)
	raw := make([]byte, cfg.DeferredSize())
	binary.LittleEndian.PutUint32(raw, 1)
	binary.LittleEndian.PutUint64(raw[8:], 0x1100)
	for i := 1; i <= maxDeferredPerFile+10; i++ {
		d.add(ps, perfevent.Sample{Raw: raw})
		if want := i >= maxDeferredPerFile; big.held != want {
			t.Fatalf("after %d deferred samples: held %v, want %v", i, big.held, want)
		}
	}
	if len(d.pending) != maxDeferredPerFile+10 {
		t.Errorf("%d pending, want %d: a held file's samples still wait for its table", len(d.pending), maxDeferredPerFile+10)
	}
	binary.LittleEndian.PutUint32(raw, 2)
	for range 2 * maxDeferredPerFile {
		d.add(ps, perfevent.Sample{Raw: raw})
	}
	if small.held {
		t.Errorf("a small file held after %d deferred samples", 2*maxDeferredPerFile)
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
		binary.LittleEndian.PutUint64(raw[48:], uint64(claim))
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
		d.add(ps, perfevent.Sample{Raw: record(c.claim, c.copied, c.pad)})
		if len(d.pending) != 1 {
			t.Fatalf("claim %d, copied %d: %d pending, want 1", c.claim, c.copied, len(d.pending))
		}
		s := d.pending[0].stack
		if len(s) != c.want || c.want > 0 && (s[0] != 1 || s[len(s)-1] != byte(c.want)) {
			t.Errorf("claim %d, copied %d: a copy of %d bytes (%v...), want %d from the record's copy", c.claim, c.copied, len(s), s[:min(len(s), 4)], c.want)
		}
	}
	d := newDeferrer(cfg)
	d.add(ps, perfevent.Sample{Raw: make([]byte, base-1)})
	if len(d.pending) != 0 {
		t.Errorf("a record of %d bytes, shorter than header and key (%d): taken", base-1, base)
	}
}

// TestHoldReadingOnLoss: when the deferred samples' ring overflows, every
// big file whose table is still being read is held (its samples are no
// longer deferred); a small file being read, files with a table, or
// refused, or not tried yet are not.
func TestHoldReadingOnLoss(t *testing.T) {
	reading := &file{name: "reading", first: -1, tried: true, big: true}
	small := &file{name: "small", first: -1, tried: true}
	loaded := &file{name: "loaded", first: 0, rows: 16, tried: true}
	refused := &file{name: "refused", first: -1, tried: true, err: errors.New("too big")}
	untried := &file{name: "untried", first: -1}
	ps := &processes{files: map[fileKey]*file{{Inode: 1}: reading, {Inode: 2}: loaded, {Inode: 3}: refused, {Inode: 4}: untried, {Inode: 5}: nil, {Inode: 6}: small}}
	ps.holdReading()
	for _, f := range []*file{reading, small, loaded, refused, untried} {
		if want := f == reading; f.held != want {
			t.Errorf("%s: held %v, want %v", f.name, f.held, want)
		}
	}
}

// TestResolveOnChange: resolve walks the waiting samples only when
// something that may let one go on changed (processes.changes), or when
// one is past its deadline.
func TestResolveOnChange(t *testing.T) {
	x86 := &elf.File{FileHeader: elf.FileHeader{Machine: elf.EM_X86_64}}
	f := &file{name: "f", elf: x86, first: -1, tried: true}
	ps := &processes{files: map[fileKey]*file{}, procs: map[uint32]*process{
		1: {maps: []procMapping{{mapping: mapping{Start: 0x1000, End: 0x2000}, file: f}}},
	}}
	cfg := prog.Config{UserDepth: 4, KernelDepth: 2}
	d := newDeferrer(cfg)
	d.queue(ps, &deferredSample{pid: 1, lookup: 0x1100, pc: 0x1100, key: make([]byte, cfg.KeySize()), arrived: time.Now()})
	d.resolve(ps, false)
	f.err = errors.New("no table") // settled, but not through loaded: no change counted
	d.resolve(ps, false)
	if len(d.pending) != 1 {
		t.Fatalf("%d pending after a resolve with no change; want 1", len(d.pending))
	}
	ps.changes++
	d.resolve(ps, false)
	if len(d.pending) != 0 {
		t.Fatalf("%d pending after a change; want 0", len(d.pending))
	}
	// With no change, a sample waiting for a small file's table is
	// counted once it waited smallFileWait, one for a big file's once it
	// waited deferredWait (the 7.2 guest of a CI, starved beside a big
	// parse, read libc's table more than 5 s after a process's first
	// samples: they ended at libc).
	f.err = nil
	for _, c := range []struct {
		big  bool
		aged time.Duration
		kept int
	}{
		{false, deferredWait + time.Second, 1},
		{false, smallFileWait + time.Second, 0},
		{true, deferredWait + time.Second, 0},
	} {
		f.big = c.big
		d = newDeferrer(cfg)
		d.queue(ps, &deferredSample{pid: 1, lookup: 0x1100, pc: 0x1100, key: make([]byte, cfg.KeySize()), arrived: time.Now().Add(-c.aged)})
		d.resolve(ps, false)
		if len(d.pending) != c.kept {
			t.Errorf("big file %v, waited %v: %d pending, want %d", c.big, c.aged, len(d.pending), c.kept)
		}
	}
}

// TestRingPages: the deferred samples' ring is 1 MiB in all on machines of
// few CPUs, 128 KiB a CPU on bigger ones, a power of two of pages (one
// page at least, of 64 KiB pages too).
func TestRingPages(t *testing.T) {
	for _, c := range []struct{ cpus, page, want int }{
		{1, 4096, 256}, {2, 4096, 128}, {3, 4096, 64}, {8, 4096, 32}, {256, 4096, 32},
		{1, 65536, 16}, {64, 65536, 2}, {0, 4096, 256},
	} {
		if got := ringPages(c.cpus, c.page); got != c.want {
			t.Errorf("%d CPUs, %d-byte pages: %d pages, want %d", c.cpus, c.page, got, c.want)
		}
	}
}

// TestUnwindCopyARM64: a deferred arm64 sample is unwound in user space
// as the kernel walks it: the sampled frame's return address from x30
// (only where pc is exact), a saved x29/x30 pair, its pointer
// authentication code stripped, to the outermost frame.
func TestUnwindCopyARM64(t *testing.T) {
	privtest.Require(t)
	same := unwind.Rule{Kind: unwind.RuleSame}
	sp := func(off int64) unwind.CFA { return unwind.CFA{Kind: unwind.CFAReg, Reg: unwind.RegSP, Offset: off} }
	entries, err := unwind.ARM64.Compile([]unwind.FDE{
		{Begin: 0x1000, End: 0x1100, Rows: []unwind.Row{{PC: 0x1000, CFA: sp(0), RBP: same, RA: same}}}, // a leaf
		{Begin: 0x1100, End: 0x1200, Rows: []unwind.Row{{PC: 0x1100, CFA: sp(32), RBP: unwind.Rule{Kind: unwind.RuleOffset, Offset: -32}, RA: unwind.Rule{Kind: unwind.RuleOffset, Offset: -24}}}},
		{Begin: 0x1200, End: 0x1300, Rows: []unwind.Row{{PC: 0x1200, CFA: sp(0), RBP: same, RA: unwind.Rule{Kind: unwind.RuleUndefined}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	// The sigreturn trampoline at 0x1400, in no FDE.
	ps := copyUnwinder(t, prog.ARM64, elf.EM_AARCH64, entries, 0x1400, []byte{0x68, 0x11, 0x80, 0xd2, 0x01, 0x00, 0x00, 0xd4})
	stack := make([]byte, 0x310)
	binary.LittleEndian.PutUint64(stack[0:], 0x7100)             // g's x29
	binary.LittleEndian.PutUint64(stack[8:], 0x002a000000001250) // g's x30, signed
	// A signal frame at 0x7000 (the trampoline's sp): the interrupted
	// x29, x30, sp and pc, f's; g's pair at that sp.
	for i, v := range []uint64{0x7400, 0x1150, 0x7300, 0x1010} {
		binary.LittleEndian.PutUint64(stack[prog.SignalX29ARM64+8*i:], v)
	}
	binary.LittleEndian.PutUint64(stack[0x300:], 0x7400)
	binary.LittleEndian.PutUint64(stack[0x308:], 0x1250)
	checkCopies(t, ps, stack, 0x1150, []copyCase{
		{"exact", 0x1010, 0x1010, []uint64{0x1150, 0x1250}, prog.StopEnd},
		{"return address", 0x1010, 0x100f, nil, prog.StopUnsupported}, // x30 is not the caller's above the sampled frame
		{"signal", 0x1400, 0x13ff, []uint64{0x1010, 0x1150, 0x1250}, prog.StopEnd},
	})
	// Go code, in a file with no table (0x3000): its prologue saved the
	// caller's x29 at sp-8 and pointed x29 there, its return address at
	// 0(sp). The copy starts 16 bytes below sp, so the record is in it.
	ps.mode = prog.UnwindAuto
	goFile := &file{name: "go", elf: &elf.File{FileHeader: elf.FileHeader{Machine: elf.EM_AARCH64}}, first: -1, tried: true, err: errors.New("no .eh_frame")}
	ps.procs[1].maps = append(ps.procs[1].maps, procMapping{mapping: mapping{Start: 0x3000, End: 0x4000}, file: goFile})
	goStack := make([]byte, 16+0x20)
	binary.LittleEndian.PutUint64(goStack[8:], 0x7100)  // sp-8: the caller's x29
	binary.LittleEndian.PutUint64(goStack[16:], 0x1250) // sp: the return address
	s := &deferredSample{pid: 1, pc: 0x3500, lookup: 0x3500, sp: 0x7000, bp: 0x7000 - 8, lr: 0x1150, stack: goStack}
	frames, stop, fp, _ := ps.unwindCopy(s, 10)
	if !slices.Equal(frames, []uint64{0x1250}) || stop != prog.StopEnd || !fp {
		t.Errorf("Go's frame record below sp: frames %#x, stop %d, fp %v; want [0x1250] by frame pointer, stop %d", frames, stop, fp, prog.StopEnd)
	}
}

// copyCase is a deferred sample at pc (looked up at lookup) and the
// frames and stop its unwinding must give.
type copyCase struct {
	name       string
	pc, lookup uint64
	want       []uint64
	stop       int32
}

// checkCopies unwinds each case's sample, its stack from sp 0x7000 (the
// copy starting Arch.CopyBelow bytes under it, as the kernel sends it)
// and its link register lr, in process 1 of ps.
func checkCopies(t *testing.T, ps *processes, stack []byte, lr uint64, cases []copyCase) {
	t.Helper()
	stack = append(make([]byte, ps.arch.CopyBelow()), stack...)
	for _, c := range cases {
		s := &deferredSample{pid: 1, pc: c.pc, lookup: c.lookup, sp: 0x7000, lr: lr, stack: stack}
		frames, stop, fp, wait := ps.unwindCopy(s, 10)
		if !slices.Equal(frames, c.want) || stop != c.stop || fp || wait != 0 {
			t.Errorf("%s: frames %#x, stop %d, fp %v, wait %v; want %#x, stop %d", c.name, frames, stop, fp, wait, c.want, c.stop)
		}
	}
}

// TestUnwindCopyRISCV64: a deferred riscv64 sample is unwound in user
// space as the kernel walks it: arm64's words with ra for x30 and s0 for
// x29, and riscv64's own, an epilogue's row with s0 still saved and the
// return address back in ra (only where pc is exact), through its signal
// frame (pc, ra, sp, then s0 at 64).
func TestUnwindCopyRISCV64(t *testing.T) {
	privtest.Require(t)
	same := unwind.Rule{Kind: unwind.RuleSame}
	sp := func(off int64) unwind.CFA { return unwind.CFA{Kind: unwind.CFAReg, Reg: unwind.RegRVSP, Offset: off} }
	saved := func(off int64) unwind.Rule { return unwind.Rule{Kind: unwind.RuleOffset, Offset: off} }
	entries, err := unwind.RISCV64.Compile([]unwind.FDE{
		{Begin: 0x1100, End: 0x1200, Rows: []unwind.Row{{PC: 0x1100, CFA: sp(16), RBP: saved(-16), RA: same}}}, // ld ra done, ld s0 not yet
		{Begin: 0x1200, End: 0x1300, Rows: []unwind.Row{{PC: 0x1200, CFA: sp(32), RBP: saved(-16), RA: saved(-8)}}},
		{Begin: 0x1300, End: 0x1400, Rows: []unwind.Row{{PC: 0x1300, CFA: sp(0), RBP: same, RA: unwind.Rule{Kind: unwind.RuleUndefined}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	// The sigreturn trampoline at 0x1500, in no FDE.
	ps := copyUnwinder(t, prog.RISCV64, elf.EM_RISCV, entries, 0x1500, []byte{0x93, 0x08, 0xb0, 0x08, 0x73, 0x00, 0x00, 0x00})
	stack := make([]byte, 0x200)
	binary.LittleEndian.PutUint64(stack[0:], 0x7100)    // f's saved s0, at its CFA - 16
	binary.LittleEndian.PutUint64(stack[0x20:], 0x7200) // g's s0 and ra, at its CFA (sp 0x7010 + 32) - 16
	binary.LittleEndian.PutUint64(stack[0x28:], 0x1310)
	// A signal frame at 0x7000 (the trampoline's sp): the interrupted pc,
	// ra and sp, f's, and its s0.
	for i, v := range []uint64{0x1110, 0x1210, 0x7000} {
		binary.LittleEndian.PutUint64(stack[prog.SignalPCRISCV64+8*i:], v)
	}
	binary.LittleEndian.PutUint64(stack[prog.SignalS0RISCV64:], 0x7400)
	checkCopies(t, ps, stack, 0x1210, []copyCase{
		{"exact", 0x1110, 0x1110, []uint64{0x1210, 0x1310}, prog.StopEnd},
		{"return address", 0x1110, 0x110f, nil, prog.StopUnsupported}, // ra is not the caller's above the sampled frame
		{"signal", 0x1500, 0x14ff, []uint64{0x1110, 0x1210, 0x1310}, prog.StopEnd},
	})
}

// copyUnwinder is the processes of a deferred-unwinding test: process 1
// maps one file at 0x1000 (its text 0x1000 bytes, sigreturn's code at
// sigAt) whose rows are entries, in a row map of the test's own.
func copyUnwinder(t *testing.T, arch prog.Arch, machine elf.Machine, entries []unwind.Entry, sigAt uint64, sigreturn []byte) *processes {
	t.Helper()
	rows, fences := unwind.Blocks(entries)
	// Chunks of one block, as many as the rows take.
	chunk := &ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8 * unwind.BlockRows, MaxEntries: 1}
	outer, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.ArrayOfMaps, KeySize: 4, ValueSize: 4, MaxEntries: uint32(len(fences)), InnerMap: chunk})
	if err != nil {
		t.Fatal(err)
	}
	m := newRowChunks(outer, chunk)
	t.Cleanup(func() { m.close(); outer.Close() })
	var blocks [][unwind.BlockRows]unwind.Entry
	for i := 0; i < len(rows); i += unwind.BlockRows {
		blocks = append(blocks, [unwind.BlockRows]unwind.Entry(rows[i:]))
	}
	if err := m.put(0, blocks); err != nil {
		t.Fatal(err)
	}
	code := make([]byte, 0x1000)
	copy(code[sigAt-0x1000:], sigreturn)
	text := &elf.Prog{ProgHeader: elf.ProgHeader{Type: elf.PT_LOAD, Flags: elf.PF_R | elf.PF_X, Vaddr: 0x1000, Filesz: 0x1000}, ReaderAt: bytes.NewReader(code)}
	f := &file{name: "f", elf: &elf.File{FileHeader: elf.FileHeader{Machine: machine}}, progs: []*elf.Prog{text}, first: 0, rows: len(entries), tried: true}
	return &processes{arch: arch, rowTable: rowTable{rows: m, fenceCopy: fences}, files: map[fileKey]*file{}, procs: map[uint32]*process{
		1: {maps: []procMapping{{mapping: mapping{Start: 0x1000, End: 0x2000}, file: f}}, scanned: time.Now(), every: time.Hour},
	}}
}

// TestBlocksRead: block reads each block from the map once while it holds
// it (a block, once stored, never changes: one written behind its back
// reads as it was), holds at most readBlocks of them, and reads every
// block right over more than that many.
func TestBlocksRead(t *testing.T) {
	privtest.Require(t)
	const n = readBlocks + 44
	chunk := &ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8 * unwind.BlockRows, MaxEntries: 64}
	outer, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.ArrayOfMaps, KeySize: 4, ValueSize: 4, MaxEntries: (n + 63) / 64, InnerMap: chunk})
	if err != nil {
		t.Fatal(err)
	}
	m := newRowChunks(outer, chunk)
	t.Cleanup(func() { m.close(); outer.Close() })
	blocks := make([][unwind.BlockRows]unwind.Entry, n)
	for b := range blocks {
		for i := range blocks[b] {
			blocks[b][i] = unwind.Entry{PC: uint32(b*unwind.BlockRows + i), Rule: uint32(b)}
		}
	}
	if err := m.put(0, blocks); err != nil {
		t.Fatal(err)
	}
	var got [unwind.BlockRows]unwind.Entry
	for round := 0; round < 2; round++ {
		for b := range blocks {
			if err := m.block(b, &got); err != nil {
				t.Fatal(err)
			}
			if got != blocks[b] {
				t.Fatalf("round %d: block %d read wrong", round, b)
			}
			if len(m.read) > readBlocks {
				t.Fatalf("%d blocks held, want at most %d", len(m.read), readBlocks)
			}
		}
	}
	b := n - 1 // just read: held
	changed := blocks[b]
	changed[0].Rule = 12345
	if err := m.chunks[b/64].Put(uint32(b%64), changed); err != nil {
		t.Fatal(err)
	}
	if err := m.block(b, &got); err != nil || got != blocks[b] {
		t.Errorf("a held block read from the map again (err %v)", err)
	}
}

// A frame section that cannot be read is said in the report, as a table
// past the parse's limits is, not left to "no table" alone.
func TestMalformedFramesSaid(t *testing.T) {
	ps := &processes{}
	ps.collected(parseResult{lane: laneSmall, f: &file{name: "libbad.so", first: -1}, err: errors.New("no CIE at 0x40")})
	ps.collected(parseResult{lane: laneSmall, f: &file{name: "libbig.so", first: -1}, err: &unwind.LimitError{What: "more than 1 FDEs"}})
	// A section without rows (libicudata's), or a parse cut short by
	// the run's end, is nothing malformed.
	ps.collected(parseResult{lane: laneSmall, f: &file{name: "libdata.so", first: -1}, err: errNoRows})
	ps.collected(parseResult{lane: laneSmall, f: &file{name: "libc.so", first: -1}, err: fmt.Errorf("read: %w", errClosing)})
	want := []string{"libbad.so: malformed frame section: no CIE at 0x40", "libbig.so: more than 1 FDEs"}
	if !slices.Equal(ps.refused, want) {
		t.Errorf("refused %q, want %q", ps.refused, want)
	}
}
