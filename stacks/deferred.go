package stacks

import (
	"encoding/binary"
	"sort"
	"time"

	"github.com/tracekit/tracekit/perfevent"
	"github.com/tracekit/tracekit/stacks/prog"
	"github.com/tracekit/tracekit/unwind"
)

// A deferred sample is one the in-kernel unwinder could not finish: it met
// an address in no mapping it knew (a process, or a library, whose
// mappings were not read yet: the first milliseconds of a process). The
// kernel sent its walk so far and a copy of the top of the user stack
// (prog.EventStack); the rest is unwound here, with the same rows, once
// the file's table is read, and counted with the kernel's counts. This
// is what perf does for every sample (--call-graph dwarf); here only for
// the samples that need it.
type deferredSample struct {
	pid                uint32
	lookup, pc, sp, bp uint64
	lr                 uint64 // arm64's x30, riscv64's ra
	stack              []byte // the copy of the stack from sp
	key                []byte // the key as far as the kernel walked it
	arrived            time.Time
	deadline           time.Time // when it is counted as far as it goes, whatever it waits for
	n                  int       // user frames in key
	fp                 bool
	wait               waitID // off-CPU: the wait it is the stack of
	// emitted (prog.Event.Emit): what the kernel sent from the key on,
	// the key and the event's record, printed once unwound, in the ring
	// sample it came in.
	emitted []byte
	smp     perfevent.Sample
	rec     *recordingSpace // the replay corpus's record of its walk (recordWalk)
}

// waitID names an off-CPU wait whose stack was deferred: its process and
// the time its thread was switched out.
type waitID struct {
	pid  uint32
	time uint64
}

// deferredWait is how long a deferred sample waits for the tables it
// needs (a big file parsed in the background, a mapping not read yet)
// before it is counted as far as it goes; smallFileWait, for a small
// file's table (libc's). That one is read in milliseconds, but on a
// starved machine (the 1-CPU guests beside a big parse and two spinners)
// it took past 5 s, and a new process's first samples ended at libc
// ([unwind error: no table]). Memory stays bounded by maxDeferred.
const (
	deferredWait  = 5 * time.Second
	smallFileWait = 60 * time.Second
)

// maxDeferred bounds the samples waiting (each holds its stack copy, 8
// KiB): past it, the oldest is unwound at once with the tables there are.
const maxDeferred = 512

// deferrer keeps the deferred samples until their tables are read, and the
// counts of those unwound.
type deferrer struct {
	cfg prog.Config
	// emit, for an emitting run, prints an unwound sample (see
	// reporter.emit) instead of counting it.
	emit    func(smp perfevent.Sample, raw []byte)
	pending []*deferredSample
	counts  map[stackKey]uint64
	lost    uint64 // samples past maxDeferredStacks
	// Off-CPU, a deferred stack counts its wait, which comes when the
	// thread runs again (prog.EventWaited), before or after the stack is
	// unwound: stacks waiting for their wait, and waits for their stack
	// (0: out of the bounds, not counted). Each bounded as the counts.
	stacks map[waitID]stackKey
	waits  map[waitID]uint64
	// resolved: processes.changes at the last resolve. Until it changes
	// no waiting sample can go on, and resolve does nothing (but for
	// samples past their deadline, the first of which is next): a starved
	// profile walked every waiting sample at every record it read.
	resolved uint64
	next     time.Time
}

// maxDeferredStacks bounds the stacks counted here, as the kernel's counts
// map is bounded: past it, a sample of a new stack is counted lost.
const maxDeferredStacks = 4096

func newDeferrer(cfg prog.Config) *deferrer {
	return &deferrer{cfg: cfg, counts: map[stackKey]uint64{}, stacks: map[waitID]stackKey{}, waits: map[waitID]uint64{}}
}

// add takes a record from the kernel: the header, the key, the context
// and the stack copy (see prog.EventStack).
func (d *deferrer) add(ps *processes, smp perfevent.Sample) {
	raw := smp.Raw
	base := d.cfg.DeferredSize() - prog.StackCopy // the stack copy's offset
	if len(raw) < base {
		return // not a record of this run's program
	}
	h := raw[:prog.DeferHeaderSize]
	s := &deferredSample{
		pid:     binary.LittleEndian.Uint32(h),
		lookup:  binary.LittleEndian.Uint64(h[8:]),
		pc:      binary.LittleEndian.Uint64(h[16:]),
		sp:      binary.LittleEndian.Uint64(h[24:]),
		bp:      binary.LittleEndian.Uint64(h[32:]),
		lr:      binary.LittleEndian.Uint64(h[40:]),
		arrived: time.Now(),
		smp:     perfevent.Sample{Pid: smp.Pid, Tid: smp.Tid, Time: smp.Time, CPU: smp.CPU},
	}
	s.deadline = s.arrived.Add(deferredWait)
	// The record ends with the copy, as long as the kernel could read (perf
	// pads the record to 8 bytes).
	n := min(binary.LittleEndian.Uint64(h[48:]), prog.StackCopy, uint64(len(raw)-base))
	keySize := d.cfg.KeySize()
	s.key = append([]byte(nil), raw[prog.DeferHeaderSize:prog.DeferHeaderSize+keySize]...)
	s.stack = append([]byte(nil), raw[base:base+int(n)]...)
	user := d.cfg.UserOffset()
	for s.n < d.cfg.UserDepth && binary.LittleEndian.Uint64(s.key[user+8*s.n:]) != 0 {
		s.n++
	}
	s.fp = s.key[7] != 0
	if d.cfg.OffCPU != nil {
		s.wait = waitID{s.pid, binary.LittleEndian.Uint64(raw[d.cfg.WaitTime():])}
	}
	if d.emit != nil {
		at := prog.DeferHeaderSize
		s.emitted = append([]byte(nil), raw[at:at+d.cfg.RecordOffset()+d.cfg.Event.Record]...)
		s.key = s.emitted[:keySize:keySize] // unwound in place, printed with its record
	}
	// Read the process's mappings, load the file's table, count the
	// sample against it.
	ps.deferredIn(ps.miss(s.pid, s.lookup))
	d.queue(ps, s)
}

// queue keeps s until its tables are read (see resolve).
func (d *deferrer) queue(ps *processes, s *deferredSample) {
	if len(d.pending) >= maxDeferred {
		// The oldest is unwound as far as it goes, not the newest: a
		// process whose big file is parsed for seconds (or a hostile
		// one) fills the queue, and a new process's first samples still
		// wait their turn for its libraries' tables, read in
		// milliseconds.
		d.finish(ps, d.pending[0], true, time.Now())
		copy(d.pending, d.pending[1:])
		d.pending = d.pending[:len(d.pending)-1]
	}
	d.pending = append(d.pending, s)
	if len(d.pending) == 1 || s.deadline.Before(d.next) {
		d.next = s.deadline
	}
}

// resolve unwinds the samples whose tables are there (all of them if
// final, or once past their deadline).
func (d *deferrer) resolve(ps *processes, final bool) {
	now := time.Now()
	if !final && ps.changes == d.resolved && (len(d.pending) == 0 || !now.After(d.next)) {
		return
	}
	d.resolved = ps.changes
	kept := d.pending[:0]
	for _, s := range d.pending {
		if !d.finish(ps, s, final, now) {
			if len(kept) == 0 || s.deadline.Before(d.next) {
				d.next = s.deadline
			}
			kept = append(kept, s)
		}
	}
	clear(d.pending[len(kept):])
	d.pending = kept
}

// finish unwinds a sample and counts it, or (unless force) leaves it
// waiting for a table being read, until its deadline (from arrival, as
// long as what it waits for allows) has passed at now.
func (d *deferrer) finish(ps *processes, s *deferredSample, force bool, now time.Time) bool {
	frames, stop, fp, wait := ps.unwindCopy(s, d.cfg.UserDepth-s.n)
	if s.rec != nil && wait == 0 {
		recordWalk(ps, s, d.cfg.UserOffset(), frames, stop, fp)
	}
	if wait > 0 && !force {
		if s.deadline = s.arrived.Add(wait); !now.After(s.deadline) {
			return false
		}
	}
	key := s.key
	user := d.cfg.UserOffset()
	for i, pc := range frames {
		binary.LittleEndian.PutUint64(key[user+8*(s.n+i):], pc)
	}
	key[4] = uint8(stop)
	if fp || s.fp {
		key[7] = 1
	}
	k := packKey(key, d.cfg)
	if d.emit != nil {
		d.emit(s.smp, s.emitted)
		return true
	}
	if d.cfg.OffCPU == nil {
		d.count(k, 1)
		return true
	}
	if n, ok := d.waits[s.wait]; ok {
		delete(d.waits, s.wait)
		d.count(k, n)
	} else if len(d.stacks) < maxDeferredStacks {
		d.stacks[s.wait] = k
	} else {
		d.lost++
	}
	return true
}

// count adds n to a stack's count; a new stack past maxDeferredStacks
// counts in lost.
func (d *deferrer) count(k stackKey, n uint64) {
	if n == 0 {
		return
	}
	if _, ok := d.counts[k]; !ok && len(d.counts) >= maxDeferredStacks {
		d.lost++
		return
	}
	d.counts[k] += n
}

// waited takes the wait of an off-CPU stack deferred to user space
// (prog.EventWaited): counted with the stack if it is unwound, else kept
// for it. The kernel sends it whatever its length: --min-block and
// --max-block apply here.
func (d *deferrer) waited(pid uint32, raw []byte) {
	if len(raw) < 24 || d.cfg.OffCPU == nil {
		return
	}
	id := waitID{pid, binary.LittleEndian.Uint64(raw[8:])}
	n := binary.LittleEndian.Uint64(raw[16:])
	if oc := d.cfg.OffCPU; n < oc.MinBlock || oc.MaxBlock > 0 && n > oc.MaxBlock {
		n = 0
	}
	if k, ok := d.stacks[id]; ok {
		delete(d.stacks, id)
		d.count(k, n)
	} else if len(d.waits) < maxDeferredStacks {
		d.waits[id] = n
	} else if n > 0 {
		d.lost++
	}
}

// unwindCopy walks a deferred sample's stack from where the kernel left
// it (walkCopy, over the process's mappings and tables): the frames after
// the sample's last one, why the walk ended, whether a frame-pointer step
// was taken, and, if a table it needs is still being read (or a mapping),
// how long from its arrival it may wait for it (0: it waits for nothing).
func (ps *processes) unwindCopy(s *deferredSample, room int) (frames []uint64, stop int32, fp bool, wait time.Duration) {
	regs := walkRegs{PC: s.pc, SP: s.sp, BP: s.bp, LR: s.lr, Lookup: s.lookup}
	read := stackReader(s.sp-ps.arch.CopyBelow(), s.stack)
	if recordWalk != nil {
		s.rec = &recordingSpace{Space: procSpace{ps, s.pid}}
		return walkCopy(ps.arch, ps.mode, s.rec, regs, read, room)
	}
	return walkCopy(ps.arch, ps.mode, procSpace{ps, s.pid}, regs, read, room)
}

// procSpace is a process's mappings and tables, as a walk asks of them.
type procSpace struct {
	ps  *processes
	pid uint32
}

func (p procSpace) At(lookup uint64) Place {
	ps := p.ps
	m := ps.mappingAt(p.pid, lookup)
	jit := m == nil && ps.jit(p.pid, lookup)
	if m == nil && !jit {
		// A mapping not read yet (a library the loader mapped since
		// the last scan): rescan, as the backoff allows, and wait.
		if pr := ps.procs[p.pid]; pr != nil && !pr.gone {
			ps.miss(p.pid, lookup)
			if m = ps.mappingAt(p.pid, lookup); m == nil {
				return Place{Wait: deferredWait}
			}
		}
	}
	pl := Place{Known: m != nil || jit, InFile: m != nil}
	if m == nil {
		return pl
	}
	f := m.file
	if f.first < 0 {
		if !f.settled() { // being read
			if f.big {
				pl.Wait = deferredWait
			} else {
				pl.Wait = smallFileWait
			}
		}
	} else if r, ok := ps.ruleAt(f, lookup-m.bias); ok {
		pl.Rule, pl.HaveRule = r, true
	} else {
		pl.Rule, pl.HaveRule = uint32(unwind.BaseStop|unwind.StopNoRow<<10), true
	}
	return pl
}

func (p procSpace) SigreturnIn(lookup, pc uint64) bool {
	m := p.ps.mappingAt(p.pid, lookup)
	return m != nil && m.file.isSigreturn(pc-m.bias)
}

func (p procSpace) Sigreturn(pc uint64) bool {
	m := p.ps.mappingAt(p.pid, pc)
	return m != nil && m.file.isSigreturn(pc-m.bias)
}

// ruleAt is the rule of the last row at or below v among a file's rows
// in the table: the fences say the block, the block is read from the map.
func (ps *processes) ruleAt(f *file, v uint64) (uint32, bool) {
	if v >= 1<<32 || f.rows == 0 {
		return 0, false
	}
	first := f.first / unwind.BlockRows
	blocks := (f.rows + unwind.BlockRows - 1) / unwind.BlockRows
	if first+blocks > len(ps.fenceCopy) {
		return 0, false
	}
	fences := ps.fenceCopy[first : first+blocks]
	b := sort.Search(len(fences), func(i int) bool { return uint64(fences[i]) > v }) - 1
	if b < 0 {
		return 0, false
	}
	var block [unwind.BlockRows]unwind.Entry
	if err := ps.rows.block(first+b, &block); err != nil {
		return 0, false
	}
	rows := block[:min(unwind.BlockRows, f.rows-b*unwind.BlockRows)]
	i := sort.Search(len(rows), func(i int) bool { return uint64(rows[i].PC) > v }) - 1
	if i < 0 {
		return 0, false
	}
	return rows[i].Rule, true
}

// jit reports whether addr is in an executable mapping of no file.
func (ps *processes) jit(pid uint32, addr uint64) bool {
	if p := ps.procs[pid]; p != nil {
		for _, m := range p.anon {
			if addr >= m.Start && addr < m.End {
				return true
			}
		}
	}
	return false
}
