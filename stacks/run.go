package stacks

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	bpf "github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"

	"github.com/tracekit/tracekit/counts"
	"github.com/tracekit/tracekit/internal/usage"
	"github.com/tracekit/tracekit/kernel"
	"github.com/tracekit/tracekit/loader"
	"github.com/tracekit/tracekit/perfevent"
	"github.com/tracekit/tracekit/run"
	"github.com/tracekit/tracekit/stacks/prog"
)

// The row table's budget, in MiB (--table-mib): the default, and the
// most, whose 1M blocks have fences of 4 MiB in one array value, the most
// an array value may hold before 6.x (KMALLOC_MAX_SIZE). The kernel
// memory is taken a chunk (4 MiB) at a time, as files are read.
const (
	DefaultBudget = 64
	MaxBudget     = 512
)

// CountEvent counts ev's occurrences by (process, user stack[, kernel
// stack]) and reports them as profile does: c's interval, count, -c,
// --json and --cumulative, -p pid, folded as --folded. (filter's
// --count-by ustack and --fields ustack.)
func CountEvent(ctx context.Context, s *run.Session, c run.Common, tree run.TreeOption, pid int, folded bool, ev StackEvent) error {
	o := &Options{Common: c, TreeOption: tree, Pid: int64(pid), Folded: folded, Unwind: prog.UnwindAuto, Budget: DefaultBudget, NoContext: true, Idle: true, Event: &ev}
	if err := o.ArchUnwind(); err != nil {
		return err
	}
	return Run(ctx, s, o)
}

// ArchUnwind holds the unwinding mode to what the architecture has: the
// in-kernel unwinder's rows and register offsets are x86-64's, arm64's
// and riscv64's; elsewhere (32-bit ARM) auto is frame pointers, said once
// at the start (fpOnly), and eh is refused.
func (o *Options) ArchUnwind() error {
	if _, ok := prog.ArchOf(runtime.GOARCH); ok {
		return nil
	}
	switch o.Unwind {
	case prog.UnwindEH:
		return usage.Errorf("--unwind=eh: the in-kernel unwinder reads x86-64, arm64 and riscv64 frames only; on %s use --unwind=fp", runtime.GOARCH)
	case prog.UnwindAuto:
		o.Unwind, o.fpOnly = prog.UnwindFP, true
	}
	return nil
}

// UserSymbols names user code addresses of processes (filter's usym()):
// an address's function, as profile names a frame, by the process's
// executable mappings (read again, at most every rescanFirst, when an
// address is in none of them) and its files' symbols; "" when it has
// none. It keeps what it read of at most maxNamed processes and files,
// and starts afresh past them. Not safe for concurrent use.
func UserSymbols() func(pid uint32, addr uint64) string {
	var n namer
	files := map[fileKey]*file{}
	type seen struct {
		maps []procMapping
		read time.Time
	}
	procs := map[uint32]*seen{}
	return func(pid uint32, addr uint64) string {
		p := procs[pid]
		if p == nil || mappingIn(p.maps, addr) == nil && time.Since(p.read) >= rescanFirst {
			if len(procs) >= maxNamed || len(files) >= maxNamed {
				closeFiles(files)
				clear(files)
				clear(procs)
			}
			p = &seen{read: time.Now()}
			if maps, err := readMaps(pid); err == nil {
				p.maps, _ = execMappings(pid, maps, files, func(error) {})
			}
			procs[pid] = p
		}
		if mappingIn(p.maps, addr) == nil {
			return ""
		}
		if name := n.name(p.maps, addr, false); name != "[unknown]" {
			return name
		}
		return ""
	}
}

// usymNames is the namer of UsymText, made at its first call.
var usymNames struct {
	sync.Mutex
	name func(pid uint32, addr uint64) string
}

// UsymText is a usym() value's text (filter's and bpftrace's layout: the
// address in 8 bytes, then the process's id): its function's name, by
// the process's mappings as they are now, else the address in hex. Safe
// for concurrent use.
func UsymText(raw []byte) string {
	if len(raw) < 12 {
		return ""
	}
	addr, pid := binary.LittleEndian.Uint64(raw), binary.LittleEndian.Uint32(raw[8:])
	usymNames.Lock()
	defer usymNames.Unlock()
	if usymNames.name == nil {
		usymNames.name = UserSymbols()
	}
	if name := usymNames.name(pid, addr); name != "" {
		return name
	}
	return fmt.Sprintf("0x%x", addr)
}

// maxNamed bounds the processes and files UserSymbols keeps.
const maxNamed = 1024

// tool is the tool that runs: profile, or filter counting an event.
func (o *Options) tool() string {
	if o.Event != nil {
		return "filter"
	}
	return "profile"
}

// unit is what a count counts: samples, or an event's occurrences.
func (o *Options) unit() string {
	if o.Event != nil {
		return "events"
	}
	return "samples"
}

// pipeline is a run's stack machinery, started: its programs loaded and
// attached, its readers and its owner running. Run's loop reads and
// reports from it; a tool that hosts an event's pipeline in its own run
// does (Hosted).
type pipeline struct {
	r        *reporter
	ps       *processes
	deferred *deferrer
	own      *owner
	records  *perfevent.Rings // an emitting run's events
	readAll  func()
	what     string
	emitting bool
	closers  []func() // in the order they were set up: close runs them backwards
}

// close stops what start started, the last first.
func (p *pipeline) close() {
	for i := len(p.closers) - 1; i >= 0; i-- {
		p.closers[i]()
	}
	p.closers = nil
}

// start loads and attaches o's programs and starts their readers.
func start(ctx context.Context, s *run.Session, o *Options) (p *pipeline, err error) {
	started := &pipeline{}
	p = started
	defer func() {
		if err != nil {
			started.close() // p is nil
		}
	}()
	ns, err := kernel.PidNamespace()
	if err != nil {
		return nil, err
	}
	cfg, notes, err := configure(o, runtime.GOARCH, readFeatures(ns))
	for _, n := range notes {
		fmt.Fprintln(s.Stderr, n)
	}
	if err != nil {
		return nil, err
	}
	if o.Command != "" && (o.Event == nil || !o.Event.All) {
		if cfg.Tree, err = s.ProcessTree(ns, o.MaxTree); err != nil {
			return nil, err
		}
	}
	spec, err := collection(cfg, o.Event)
	if err != nil {
		return nil, err
	}
	coll, err := s.Load(spec)
	if err != nil {
		return nil, err
	}
	var rows *rowChunks
	if m := coll.Maps["rows"]; m != nil {
		rows = newRowChunks(m, cfg.RowChunk())
	}
	ps := newProcesses(rows, coll.Maps["fences"], coll.Maps["mappings"], cfg.Rows, o.Pid != 0 || o.Command != "")
	ps.short, ps.mode, ps.arch = o.NoParams, cfg.Mode, cfg.Arch
	deferred := newDeferrer(cfg)
	r := &reporter{cur: newHeld(), lastDrain: time.Now(), lastSweep: time.Now(), s: s, o: o, coll: coll, ps: ps, deferred: deferred, start: time.Now(), kernel: map[uint64]string{}, cfg: cfg, contexts: map[uint64][]byte{}, fpFrames: fpFrames(cfg.UserDepth)}
	emitting := cfg.Event != nil && cfg.Event.Emit
	if emitting {
		deferred.emit = r.emit
	} else {
		// The whole run's counts for the files, apart from the report's
		// only where reports start again each interval.
		if (o.Pprof != "" || o.SVG != "") && o.Interval() > 0 && !o.Cumulative {
			r.whole = newHeld()
		}
		if r.swap, err = loader.NewSwapped(coll.Maps["counts"], coll.Maps[prog.CountsSwap], coll.Maps[prog.GenMap]); err != nil {
			return nil, err
		}
		p.closers = append(p.closers, func() { r.swap.Close() })
		if cfg.ShortKeySize() > 0 {
			r.swap.Also(coll.Maps[prog.ShortCounts], coll.Maps[prog.ShortSwap])
		}
	}
	p.closers = append(p.closers, ps.close)
	ps.labels, ps.labelMap, ps.context = o.Labels, mapOrNil(coll.Maps["labels"]), cfg.Context
	if cfg.Mode != prog.UnwindFP {
		if err := coll.Maps["progs"].Put(uint32(0), coll.Programs["unwind"]); err != nil {
			return nil, fmt.Errorf("install the unwinder: %w", err)
		}
	}
	if err := s.AttachTracepoint(coll.Programs["exec"], "sched", "sched_process_exec"); err != nil {
		return nil, err
	}
	if cfg.Exit != nil {
		if err := s.AttachTracepoint(coll.Programs["exit"], "sched", "sched_process_exit"); err != nil {
			return nil, err
		}
	}
	// The process of -p or -c is known before its first sample: its exec
	// (the command's, once released) is announced at once.
	for _, pid := range []int{int(o.Pid), s.CommandPid()} {
		if pid == 0 {
			continue
		}
		if err := coll.Maps["seen"].Put(uint32(pid), uint64(0)); err != nil {
			return nil, fmt.Errorf("record pid %d: %w", pid, err)
		}
		ps.scan(uint32(pid), true)
	}
	if pid := s.CommandPid(); pid != 0 {
		if cfg.Tree != nil { // not every process's events (All)
			if err := s.FollowProcessTree(coll); err != nil {
				return nil, err
			}
		}
		ps.preload(o.Command)
	}
	// Process notices are 16 or 24 bytes: 8 pages a CPU hold a thousand.
	// Deferred samples are records of 1.6 to 10 KiB (as long as their
	// stack's copy), in a ring of their own (see prog.Collection) of
	// deferredRingPages.
	rings, err := s.OpenOutputRings(coll.Maps["events"], "process notifications", 8, perfevent.WakeEach)
	if err != nil {
		return nil, err
	}
	// Frame pointers defer nothing: no ring, no reader.
	var stacks *perfevent.Rings
	if cfg.Mode != prog.UnwindFP {
		if stacks, err = s.OpenOutputRings(coll.Maps["stacks"], "deferred samples", deferredRingPages(), perfevent.WakeEach); err != nil {
			return nil, err
		}
	}
	handle := func(smp perfevent.Sample) {
		if len(smp.Raw) < 16 {
			return
		}
		pid, kind := binary.LittleEndian.Uint32(smp.Raw), binary.LittleEndian.Uint32(smp.Raw[4:])
		switch kind {
		case prog.EventNew:
			ps.announced(pid)
		case prog.EventExit:
			ps.exited(pid)
		case prog.EventStack:
			deferred.add(ps, smp)
		case prog.EventWaited:
			deferred.waited(pid, smp.Raw)
		}
	}
	// One goroutine owns the processes, the deferred samples and the
	// counts (owner): the readers, the parsers and the reports hand it
	// their work. Its own work comes due at times of its own: the rescans
	// of processes whose libraries or labels may still come, the deferred
	// samples' deadlines, the drain of the counts. An idle machine wakes
	// it about once a second, not at a fixed tick.
	own, stopOwner := newOwner(rescanFirst, ps.done, ps.collected, func() (time.Duration, error) {
		ps.collect()
		rescan := ps.refresh()
		deferred.resolve(ps, false)
		if err := r.drainDue(); err != nil {
			return 0, err
		}
		return r.nextDue(rescan), nil
	}, s.Stop)
	p.closers = append(p.closers, stopOwner) // after the readers (set up later, closed sooner)
	// New processes and deferred samples wake their readers at once
	// (WakeEach), each waiting on its own rings (a ring's Close ends its
	// reader before it unmaps them) and handing the read to the owner.
	reader := func(rg *perfevent.Rings) func() error {
		return func() error {
			return own.read(func() error {
				rg.Read(handle)
				if rg == stacks && stacks.Lost > ps.deferLost {
					ps.deferLost = stacks.Lost
					ps.holdReading()
				}
				return nil
			})
		}
	}
	for _, rg := range []*perfevent.Rings{rings, stacks} {
		if rg == nil {
			continue
		}
		stop, err := rg.Drain(0, reader(rg), s.Stop)
		if err != nil {
			return nil, err
		}
		p.closers = append(p.closers, stop)
	}

	// An emitting run's events, each printed as it comes (those deferred
	// once unwound, later).
	var records *perfevent.Rings
	emit := func(smp perfevent.Sample) { r.emit(smp, smp.Raw) }
	if emitting {
		if records, err = s.OpenOutputRings(coll.Maps[prog.RecordsMap], o.Event.Name, perfevent.DefaultRingPages, perfevent.WakeBatch); err != nil {
			return nil, err
		}
		stopRecords, err := records.Drain(100*time.Millisecond, func() error {
			return own.do(func() error {
				records.Read(emit)
				return nil
			})
		}, s.Stop)
		if err != nil {
			return nil, err
		}
		p.closers = append(p.closers, stopRecords)
	}
	// The notices first: a process's exec before its deferred samples.
	readAll := func() {
		rings.Read(handle)
		if stacks != nil {
			stacks.Read(handle)
		}
		if records != nil {
			records.Read(emit)
		}
	}
	what := "on-CPU stacks"
	if o.Event != nil {
		what = o.Event.Name + " by user stack"
		if emitting {
			what = "events of " + o.Event.Name + " with their user stacks"
		}
		if err := o.Event.Attach(coll.Programs["sample"]); err != nil {
			return nil, err
		}
	} else if o.OffCPU {
		what = "off-CPU stacks"
		if err := s.AttachTracepoint(coll.Programs["sample"], "sched", "sched_switch"); err != nil {
			return nil, err
		}
	} else {
		attr := unix.PerfEventAttr{
			Type:   unix.PERF_TYPE_SOFTWARE,
			Config: unix.PERF_COUNT_SW_CPU_CLOCK,
			Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
			// A fixed period of CPU-clock nanoseconds, not a frequency the
			// kernel reaches by adjusting the period tick by tick (which
			// overshot by 9% in a 1 s burst after idle): F samples per CPU-second.
			Sample: uint64(time.Second) / uint64(o.Frequency),
		}
		var clock *perfevent.PerCPU
		switch {
		case o.Tid != 0:
			clock, err = perfevent.OpenThread(fmt.Sprintf("CPU clock sampling of thread %d", o.Tid), attr, coll.Programs["sample"], o.Tid)
		case o.CPUs != nil:
			clock, err = perfevent.OpenOn(o.CPUs, "CPU clock sampling", attr, coll.Programs["sample"], perfevent.AttachEach, nil)
		default:
			clock, err = perfevent.OpenPerCPU("CPU clock sampling", attr, coll.Programs["sample"], perfevent.AttachEach, nil)
		}
		if err != nil {
			return nil, err
		}
		s.OnDetach("", clock.Close)
	}

	// The output files are created now: a path that cannot be written is
	// an error before the run, not after it.
	for _, out := range []struct {
		path string
		f    **outFile
	}{{o.Pprof, &r.pprof}, {o.SVG, &r.svg}} {
		if out.path == "" {
			continue
		}
		f, err := createOut(out.path)
		if err != nil {
			return nil, err
		}
		*out.f = f
		s.OnClose("", f.close)
	}
	r.lost.Cumulative = o.Cumulative
	p.r, p.ps, p.deferred, p.own, p.records, p.readAll, p.what, p.emitting = r, ps, deferred, own, records, readAll, what, emitting
	return p, nil
}

// collection is cfg's programs and maps, the gate's references to its
// host's maps (ev.Maps) resolved.
func collection(cfg prog.Config, ev *StackEvent) (*ebpf.CollectionSpec, error) {
	spec, err := prog.Collection(cfg)
	if err != nil {
		return nil, err
	}
	if ev != nil && len(ev.Maps) > 0 {
		insns := spec.Programs["sample"].Instructions
		for name, m := range ev.Maps {
			if err := insns.AssociateMap(name, m); err != nil && !errors.Is(err, bpf.ErrUnreferencedSymbol) {
				return nil, fmt.Errorf("the gate's map %s: %w", name, err)
			}
		}
	}
	return spec, nil
}

// EventSpec is the collection StartEvent would load for ev on this
// kernel: its gate in the sampler, the unwinder, their maps. For a
// host's load test of its gates.
func EventSpec(ev StackEvent) (*ebpf.CollectionSpec, error) {
	ev.All, ev.Emit = true, true
	o := &Options{Unwind: prog.UnwindAuto, Budget: DefaultBudget, NoContext: true, Idle: true, Event: &ev}
	if err := o.ArchUnwind(); err != nil {
		return nil, err
	}
	ns, err := kernel.PidNamespace()
	if err != nil {
		return nil, err
	}
	cfg, _, err := configure(o, runtime.GOARCH, readFeatures(ns))
	if err != nil {
		return nil, err
	}
	return collection(cfg, &ev)
}

// gather reads what the rings hold and unwinds the deferred samples it
// can: at the end (final), all of them, after the new processes' tables.
// The owner's work.
func (p *pipeline) gather(final bool) {
	p.readAll()
	p.ps.collect()
	if final {
		p.ps.await(laneSmall, finalWait)
	}
	p.deferred.resolve(p.ps, final)
}

// lostEvents says at the end what an emitting run's ring lost.
func (p *pipeline) lostEvents(s *run.Session, o *Options) {
	if lost, exact := p.records.LostEvents(); lost > 0 {
		atLeast := ""
		if !exact {
			atLeast = "at least "
		}
		fmt.Fprintf(s.Stderr, "%s: %s%d events lost: a ring buffer was full (a stricter --where keeps up)\n", o.tool(), atLeast, lost)
	}
}

// Hosted is an event's stack pipeline run inside another tool's run
// (bpftrace's ustack): started with its programs attached, each event
// printed through the event's Print as it comes; the host calls Flush at
// its run's end, then Close (or the session's close does).
type Hosted struct {
	p *pipeline
	s *run.Session
	o *Options
}

// StartEvent starts ev's pipeline for a host's run: every process's
// events (ev.All is taken as set: a host that wants -c's tree only gates
// on it), or pid's, unwound as filter's --fields ustack unwinds them.
func StartEvent(ctx context.Context, s *run.Session, c run.Common, pid int, ev StackEvent) (*Hosted, error) {
	ev.All, ev.Emit = true, true
	o := &Options{Common: c, Pid: int64(pid), Unwind: prog.UnwindAuto, Budget: DefaultBudget, NoContext: true, Idle: true, Event: &ev}
	if err := o.ArchUnwind(); err != nil {
		return nil, err
	}
	p, err := start(ctx, s, o)
	if err != nil {
		return nil, err
	}
	h := &Hosted{p: p, s: s, o: o}
	s.OnClose("", func() error { h.Close(); return nil })
	return h, nil
}

// Flush prints the events still in the rings and the deferred ones,
// unwound once their files' tables are read, and says what was lost.
func (h *Hosted) Flush() error {
	return h.p.own.do(func() error {
		h.p.gather(true)
		h.p.lostEvents(h.s, h.o)
		return nil
	})
}

// Close stops the pipeline's readers and owner; twice is harmless.
func (h *Hosted) Close() { h.p.close() }

// Run samples and reports as o says, until ctx is done, the -c command
// exits or o's count of reports was printed.
func Run(ctx context.Context, s *run.Session, o *Options) error {
	p, err := start(ctx, s, o)
	if err != nil {
		return err
	}
	defer p.close()
	r, own, emitting := p.r, p.own, p.emitting
	return s.Loop(ctx, p.what, func(final bool) error {
		var counted *held
		var todo []uint64
		err := own.do(func() error {
			p.gather(final)
			if emitting {
				if final {
					p.lostEvents(s, o)
				}
				return nil
			}
			if err := r.drain(final); err != nil {
				return err
			}
			counted = r.take(final)
			if final {
				// Named and printed in the same piece of work: no sample
				// the final report counts is added twice, none added after
				// it is missed.
				return r.nameAndReport(counted)
			}
			todo = r.kernelTodo(counted)
			return nil
		})
		if err != nil || counted == nil || final {
			return err
		}
		// An interval report's kernel names are looked up here, while the
		// owner goes on: a pass over kallsyms takes 10 to 20 s in the
		// 1-CPU guests beside two spinners, and readers that waited for it
		// let the deferred samples' ring overflow and a new process's
		// first samples be cut short. A report the signal overtook is left
		// out (the final one, next, counts its samples): in a starved
		// guest its pass over kallsyms outlasted the 30 s the watchdog
		// gives the ending.
		names, hidden, err := lookupKernel(ctx, todo)
		return own.do(func() error {
			r.printing = nil
			if ctx.Err() != nil {
				r.putBack(counted)
				return nil
			}
			if err != nil {
				return err
			}
			r.learnKernel(todo, names, hidden)
			return r.report(time.Now(), false, counted)
		})
	})
}

type reporter struct {
	s        *run.Session
	o        *Options
	coll     *ebpf.Collection
	ps       *processes
	deferred *deferrer         // the samples unwound in user space
	kernel   map[uint64]string // kernel function names, resolved at report time
	cfg      prog.Config       // the key's layout
	warned   bool
	pprof    *outFile // --pprof, created at the start
	svg      *outFile // --svg
	// The counts, drained from the kernel's two hashes (swap) every
	// drainEvery and at each report: the report's (since the last one,
	// or the start: --cumulative, or no interval), and the whole run's
	// for --pprof and --svg where that is not the report's.
	swap      *loader.Swapped
	cur       *held
	whole     *held
	printing  *held // an interval report's, taken, while it is named
	lastDrain time.Time
	lastSweep time.Time
	lost      counts.Deltas // the kernel's and the deferrer's lost samples
	start     time.Time
	// contexts: the contexts table, by id, as read so far (its entries
	// are never deleted: an id names one context for the whole run).
	contexts map[uint64][]byte
	// fpFrames: the most user frames a frame-pointer walk
	// (bpf_get_stack) writes, the key's or kernel.perf_event_max_stack,
	// whichever is fewer; a walk that long is cut.
	fpFrames int
}

// emit prints an event of an emitting run (prog.Event.Emit): raw is what
// the kernel sent from the key on (the key, then the record), smp the
// sample it came in.
func (r *reporter) emit(smp perfevent.Sample, raw []byte) {
	off := r.cfg.RecordOffset()
	if len(raw) < off+r.o.Event.Record {
		return // not a record of this run's program
	}
	k := decodeKey(raw[:r.cfg.KeySize()], r.cfg)
	user, end := r.userFrames(k)
	smp.Raw = raw[off : off+r.o.Event.Record]
	r.o.Event.Print(smp, Stack{Comm: r.ps.comm(k.Pid), User: user, End: end, Kernel: k.Kernel})
}

// deferredRingPages sizes each CPU's ring of deferred samples: 128 KiB (a
// dozen whole stack copies, tens of a main thread's), and on a machine of
// few CPUs 1 MiB in all. A 1-CPU machine is the one where profile is
// starved beside busy processes and reads the ring late; 128 KiB there
// overflowed while it read a big table (TestHostileFrames in the guests).
func deferredRingPages() int {
	n := 1
	if cpus, err := perfevent.OnlineCPUs(); err == nil && len(cpus) > 0 {
		n = len(cpus)
	}
	return ringPages(n, os.Getpagesize())
}

// ringPages is the most pages (a power of two, at least one) within
// max(128 KiB, 1 MiB / cpus).
func ringPages(cpus, page int) int {
	bytes := max(128<<10, (1<<20)/max(cpus, 1))
	pages := 1
	for pages*2*page <= bytes {
		pages *= 2
	}
	return pages
}
