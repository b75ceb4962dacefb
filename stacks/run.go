package stacks

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"maps"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/counts"
	"github.com/tracekit/tracekit/hook"
	"github.com/tracekit/tracekit/internal/usage"
	"github.com/tracekit/tracekit/kbtf"
	"github.com/tracekit/tracekit/kernel"
	"github.com/tracekit/tracekit/loader"
	"github.com/tracekit/tracekit/perfevent"
	"github.com/tracekit/tracekit/procfs"
	"github.com/tracekit/tracekit/run"
	"github.com/tracekit/tracekit/stacks/prog"
	"github.com/tracekit/tracekit/terminal"
	"github.com/tracekit/tracekit/tracefs"
)

// The row table's budget, in MiB (--table-mib): the default, and the
// most, whose 1M blocks have fences of 4 MiB in one array value, the most
// an array value may hold before 6.x (KMALLOC_MAX_SIZE). The kernel
// memory is taken a chunk (4 MiB) at a time, as files are read.
const (
	DefaultBudget = 64
	MaxBudget     = 512
)

// stackKey is a counts map key as user space holds it (packKey): the
// kernel's keys have room for every frame the run keeps (64 kernel and 256
// user), most of it zeros.
type stackKey string

// packKey packs a raw key (its depths the run's, or a short key: a
// prefix with fewer user frames, prog.Config.ShortKeySize): the header,
// the numbers of kernel and user frames (u16 each), the labels, then the
// frames up to the first 0 of each stack. A walk writes no frame past a
// 0, and decoding stops at the first: two keys that differ only past it
// are one stack.
func packKey(b []byte, cfg prog.Config) stackKey {
	kernel, user := cfg.KernelOffset(), cfg.UserOffset()
	if len(b) < user {
		return stackKey(b)
	}
	nk, nu := depth(b[kernel:user]), depth(b[user:min(len(b), cfg.KeySize())])
	out := make([]byte, 0, 12+kernel-8+8*(nk+nu))
	out = append(out, b[:8]...)
	out = binary.LittleEndian.AppendUint16(out, uint16(nk))
	out = binary.LittleEndian.AppendUint16(out, uint16(nu))
	out = append(out, b[8:kernel]...)
	out = append(out, b[kernel:kernel+8*nk]...)
	out = append(out, b[user:user+8*nu]...)
	return stackKey(out)
}

// depth is the number of frames before the first 0 of a stack.
func depth(b []byte) int {
	n := 0
	for ; 8*n+8 <= len(b) && binary.LittleEndian.Uint64(b[8*n:]) != 0; n++ {
	}
	return n
}

// parts splits a packed key into its labels and its kernel and user
// frames (each stack's up to its first 0); ok is false for a key packKey
// did not make (too short to pack), which is the kernel's layout as it is.
func (k stackKey) parts(cfg prog.Config) (labels, kernel, user []byte, ok bool) {
	p := []byte(k)
	frames := 12 + cfg.KernelOffset() - 8
	if len(p) < frames {
		return nil, nil, nil, false
	}
	nk, nu := int(binary.LittleEndian.Uint16(p[8:])), int(binary.LittleEndian.Uint16(p[10:]))
	if nk > cfg.KernelDepth || nu > cfg.UserDepth || len(p) < frames+8*(nk+nu) {
		return nil, nil, nil, false
	}
	return p[12:frames], p[frames : frames+8*nk], p[frames+8*nk : frames+8*(nk+nu)], true
}

// raw unpacks k into the kernel's layout (a key of cfg.KeySize() bytes).
func (k stackKey) raw(cfg prog.Config) []byte {
	b := make([]byte, cfg.KeySize())
	labels, kernel, user, ok := k.parts(cfg)
	if !ok {
		copy(b, k)
		return b
	}
	copy(b, k[:8])
	copy(b[8:], labels)
	copy(b[cfg.KernelOffset():], kernel)
	copy(b[cfg.UserOffset():], user)
	return b
}

type decodedKey struct {
	Pid     uint32
	Stop    uint8
	KernErr uint8
	FP      bool     // a frame was stepped by its frame pointer (auto)
	Kernel  []uint64 // leaf first, up to the first 0
	User    []uint64
}

// decode decodes a packed key in place: a report decodes every key it
// holds, twice (its kernel frames named, then its stacks), and a key
// unpacked would be 2.6 KiB of garbage each time.
func (k stackKey) decode(cfg prog.Config) decodedKey {
	_, kernel, user, ok := k.parts(cfg)
	if !ok {
		return decodeKey(k.raw(cfg), cfg)
	}
	b := []byte(k)
	return decodedKey{Pid: binary.LittleEndian.Uint32(b), Stop: b[4], KernErr: b[5], FP: b[7] != 0, Kernel: pcs(kernel), User: pcs(user)}
}

// decodeKey decodes a raw key.
func decodeKey(b []byte, cfg prog.Config) decodedKey {
	kernel, user := cfg.KernelOffset(), cfg.UserOffset()
	return decodedKey{Pid: binary.LittleEndian.Uint32(b), Stop: b[4], KernErr: b[5], FP: b[7] != 0,
		Kernel: pcs(b[kernel : kernel+8*cfg.KernelDepth]),
		User:   pcs(b[user:min(len(b), user+8*cfg.UserDepth)])}
}

// pcs reads a stack's frames up to its first 0 (nil if none).
func pcs(b []byte) []uint64 {
	var out []uint64
	for i := range depth(b) {
		out = append(out, binary.LittleEndian.Uint64(b[8*i:]))
	}
	return out
}

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
// an address's function, as profile names a frame, by the process's maps
// (read when an address is in none read so far) and its files' symbols;
// "" when it has none. Not safe for concurrent use.
func UserSymbols() func(pid uint32, addr uint64) string {
	ps := newProcesses(nil, nil, nil, 0, false)
	return func(pid uint32, addr uint64) string {
		if ps.mappingAt(pid, addr) == nil {
			ps.scan(pid, false)
		}
		if ps.mappingAt(pid, addr) == nil {
			return ""
		}
		name := ps.symbolize(pid, addr, false)
		if name == "[unknown]" {
			return ""
		}
		return name
	}
}

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

// features is what a run's programs depend on in the kernel at hand:
// readFeatures reads this kernel's, a test gives any kernel's. What costs
// a read of the kernel's BTF is asked for only when needed.
type features struct {
	readers              asm.Readers
	ns                   *asm.PidNS
	raw                  bool // raw tracepoints (4.17+)
	bigKeys              bool // hash keys of a whole stack (5.11+; 512 bytes before)
	taskRegs, lazyHashes bool
	threadPointer        func() (int, error) // task_struct's thread pointer
	taskStack            func() (int, error) // task_struct.stack
	startStack           func() *prog.TaskStartStack
	schedSwitch          func() (*tracefs.Format, error)
	exit                 func() (*prog.TaskExit, error)
}

func readFeatures(ns *asm.PidNS) features {
	return features{
		readers: kernel.Readers(), ns: ns, raw: hook.HaveRawTracepoints(), bigKeys: haveBigKeys(),
		taskRegs: kernel.HaveTaskPtRegs(), lazyHashes: kernel.HaveLazyHashes(),
		threadPointer: threadPointer,
		taskStack:     func() (int, error) { return kbtf.MemberOffset("task_struct", "stack") },
		startStack: func() *prog.TaskStartStack {
			mm, err1 := kbtf.MemberOffset("task_struct", "mm")
			start, err2 := kbtf.MemberOffset("mm_struct", "start_stack")
			if err1 != nil || err2 != nil {
				return nil
			}
			return &prog.TaskStartStack{MM: mm, StartStack: start}
		},
		schedSwitch: func() (*tracefs.Format, error) { return tracefs.ReadFormat("sched", "sched_switch") },
		exit:        taskExit,
	}
}

// configure is the programs' configuration for o on a kernel of features
// and an architecture, goarch; notes are what the run says of it on
// stderr, in order. It reads nothing itself: tests hand it any kernel.
func configure(o *Options, goarch string, k features) (cfg prog.Config, notes []string, err error) {
	note := func(format string, args ...any) { notes = append(notes, fmt.Sprintf(format, args...)) }
	cfg = prog.Config{Mode: o.Unwind, Pid: int(o.Pid), Idle: o.Idle, Rows: o.Budget << 20 / 8, Readers: k.readers,
		KernelDepth: prog.KernelFrames, UserDepth: prog.UserFrames, NS: k.ns, RawEvents: k.raw}
	cfg.Arch, _ = prog.ArchOf(goarch)
	if o.Event != nil {
		cfg.Event = &o.Event.Event
		if !o.Event.Kernel {
			cfg.KernelDepth = 0
		}
	}
	if o.fpOnly {
		note("%s: on %s user stacks are walked by frame pointers only (the in-kernel unwinder reads x86-64, arm64 and riscv64 frames): code built without them gives partial stacks", o.tool(), goarch)
	}
	for _, l := range o.Labels {
		cfg.Labels = append(cfg.Labels, l.Label)
		if l.TLS && cfg.ThreadPointer == 0 {
			if cfg.ThreadPointer, err = k.threadPointer(); err != nil {
				return cfg, notes, err
			}
		}
	}
	if !o.NoContext && (goarch == "amd64" || goarch == "arm64") {
		if cfg.ThreadPointer == 0 {
			var err error
			if cfg.ThreadPointer, err = k.threadPointer(); err != nil {
				note("profile: the OpenTelemetry context and custom labels are not read: %v", err)
			}
		}
		cfg.Context = cfg.ThreadPointer != 0
	}
	if !k.bigKeys {
		// Older kernels (5.10 here) take hash keys of MAX_BPF_STACK, 512
		// bytes, at most; labels take user frames' room.
		small := prog.Config{KernelDepth: prog.SmallKernelFrames, UserDepth: prog.SmallUserFrames}
		if cfg.KernelDepth == 0 {
			// No kernel stack: its room is the user stack's.
			small.KernelDepth, small.UserDepth = 0, prog.SmallKernelFrames+prog.SmallUserFrames
		}
		depth := func() int {
			c := cfg
			c.KernelDepth, c.UserDepth = small.KernelDepth, small.UserDepth
			return small.UserDepth - (c.KeySize()-small.KeySize()+7)/8
		}
		if depth() < 8 && cfg.Context {
			// The labels asked for come first: the context's id takes 8 bytes.
			cfg.Context = false
			note("profile: the OpenTelemetry context and custom labels are not read: these labels fill this kernel's 512-byte hash keys")
		}
		cfg.KernelDepth, cfg.UserDepth = small.KernelDepth, depth()
		if cfg.UserDepth < 8 {
			return cfg, notes, usage.Errorf("this kernel takes hash keys of 512 bytes at most, and these labels leave room for %d user frames: use fewer string labels", cfg.UserDepth)
		}
		note("%s: this kernel takes hash keys of 512 bytes at most: stacks are cut at %d kernel and %d user frames", o.tool(), cfg.KernelDepth, cfg.UserDepth)
	}
	cfg.TaskRegs, cfg.LazyHashes = k.taskRegs && !o.assumeMissing("task_pt_regs"), k.lazyHashes
	if !cfg.TaskRegs && cfg.Mode != prog.UnwindFP {
		if off, err := k.taskStack(); err == nil {
			cfg.TaskStack = off
		} else {
			note("%s: %s taken in the kernel will have no user stack: %v", o.tool(), o.unit(), err)
		}
	}
	if cfg.Mode != prog.UnwindFP {
		cfg.StartStack = k.startStack()
	}
	if o.OffCPU {
		f, err := k.schedSwitch()
		if err != nil {
			return cfg, notes, fmt.Errorf("--off-cpu: %w", err)
		}
		if cfg.OffCPU, err = prog.NewOffCPU(f, o.MinBlock*1000, o.MaxBlock*1000); err != nil {
			return cfg, notes, fmt.Errorf("--off-cpu: %w", err)
		}
	}
	if exit, err := k.exit(); err == nil {
		cfg.Exit = exit
	} else if len(cfg.Labels) > 0 || cfg.Context {
		note("profile: a pid that another process gets again keeps the first one's labels: %v", err)
	}
	return cfg, notes, nil
}

// Run samples and reports as o says, until ctx is done, the -c command
// exits or o's count of reports was printed.
func Run(ctx context.Context, s *run.Session, o *Options) error {
	ns, err := kernel.PidNamespace()
	if err != nil {
		return err
	}
	cfg, notes, err := configure(o, runtime.GOARCH, readFeatures(ns))
	for _, n := range notes {
		fmt.Fprintln(s.Stderr, n)
	}
	if err != nil {
		return err
	}
	if o.Command != "" && (o.Event == nil || !o.Event.All) {
		if cfg.Tree, err = s.ProcessTree(ns, o.MaxTree); err != nil {
			return err
		}
	}
	spec, err := prog.Collection(cfg)
	if err != nil {
		return err
	}
	coll, err := s.Load(spec)
	if err != nil {
		return err
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
			return err
		}
		defer r.swap.Close()
		if cfg.ShortKeySize() > 0 {
			r.swap.Also(coll.Maps[prog.ShortCounts], coll.Maps[prog.ShortSwap])
		}
	}
	defer ps.close()
	ps.labels, ps.labelMap, ps.context = o.Labels, mapOrNil(coll.Maps["labels"]), cfg.Context
	if cfg.Mode != prog.UnwindFP {
		if err := coll.Maps["progs"].Put(uint32(0), coll.Programs["unwind"]); err != nil {
			return fmt.Errorf("install the unwinder: %w", err)
		}
	}
	if err := s.AttachTracepoint(coll.Programs["exec"], "sched", "sched_process_exec"); err != nil {
		return err
	}
	if cfg.Exit != nil {
		if err := s.AttachTracepoint(coll.Programs["exit"], "sched", "sched_process_exit"); err != nil {
			return err
		}
	}
	// The process of -p or -c is known before its first sample: its exec
	// (the command's, once released) is announced at once.
	for _, pid := range []int{int(o.Pid), s.CommandPid()} {
		if pid == 0 {
			continue
		}
		if err := coll.Maps["seen"].Put(uint32(pid), uint64(0)); err != nil {
			return fmt.Errorf("record pid %d: %w", pid, err)
		}
		ps.scan(uint32(pid), true)
	}
	if pid := s.CommandPid(); pid != 0 {
		if err := s.FollowProcessTree(coll); err != nil {
			return err
		}
		ps.preload(o.Command)
	}
	// Process notices are 16 or 24 bytes: 8 pages a CPU hold a thousand.
	// Deferred samples are records of 1.6 to 10 KiB (as long as their
	// stack's copy), in a ring of their own (see prog.Collection) of
	// deferredRingPages.
	rings, err := s.OpenOutputRings(coll.Maps["events"], "process notifications", 8, perfevent.WakeEach)
	if err != nil {
		return err
	}
	// Frame pointers defer nothing: no ring, no reader.
	var stacks *perfevent.Rings
	if cfg.Mode != prog.UnwindFP {
		if stacks, err = s.OpenOutputRings(coll.Maps["stacks"], "deferred samples", deferredRingPages(), perfevent.WakeEach); err != nil {
			return err
		}
	}
	var mu sync.Mutex
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
	// The notices first: a process's exec before its deferred samples.
	read := func() {
		rings.Read(handle)
		if stacks != nil {
			stacks.Read(handle)
		}
	}
	// New processes and deferred samples wake their readers at once
	// (WakeEach), each reading its own rings (a ring's Close ends its
	// reader before it unmaps them). The notices' reader also wakes for
	// the work due at times of its own (nextDue): the rescans of processes
	// whose libraries or labels may still come, the deferred samples'
	// deadlines, the drain of the counts; and at a parser's result. An
	// idle machine wakes it about once a second, not at a fixed tick.
	var due time.Time // when the notices' reader wakes next
	drain := func(rg *perfevent.Rings) func() (time.Duration, error) {
		return func() (time.Duration, error) {
			mu.Lock()
			defer mu.Unlock()
			rg.Read(handle)
			if rg == stacks && stacks.Lost > ps.deferLost {
				ps.deferLost = stacks.Lost
				ps.holdReading()
			}
			ps.collect()
			rescan := ps.refresh()
			deferred.resolve(ps, false)
			if err := r.drainDue(); err != nil {
				return 0, err
			}
			wait := r.nextDue(rescan)
			if at := time.Now().Add(wait); rg == rings {
				due = at
			} else if at.Before(due) {
				rings.Wake() // work due sooner than it wakes (a deferred sample's rescan)
			}
			return wait, nil
		}
	}
	stop, err := rings.DrainDue(rescanFirst, drain(rings), s.Stop)
	if err != nil {
		return err
	}
	defer stop()
	wake := rings.Wake
	ps.wake.Store(&wake)
	defer ps.wake.Store(nil)
	if stacks != nil {
		next := drain(stacks)
		stopStacks, err := stacks.Drain(0, func() error { _, err := next(); return err }, s.Stop)
		if err != nil {
			return err
		}
		defer stopStacks()
	}

	// An emitting run's events, each printed as it comes (those deferred
	// once unwound, later).
	var records *perfevent.Rings
	if emitting {
		if records, err = s.OpenOutputRings(coll.Maps[prog.RecordsMap], o.Event.Name, perfevent.DefaultRingPages, perfevent.WakeBatch); err != nil {
			return err
		}
		emit := func(smp perfevent.Sample) { r.emit(smp, smp.Raw) }
		stopRecords, err := records.Drain(100*time.Millisecond, func() error {
			mu.Lock()
			defer mu.Unlock()
			records.Read(emit)
			return nil
		}, s.Stop)
		if err != nil {
			return err
		}
		defer stopRecords()
		read = func() {
			rings.Read(handle)
			if stacks != nil {
				stacks.Read(handle)
			}
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
			return err
		}
	} else if o.OffCPU {
		what = "off-CPU stacks"
		if err := s.AttachTracepoint(coll.Programs["sample"], "sched", "sched_switch"); err != nil {
			return err
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
		clock, err := perfevent.OpenPerCPU("CPU clock sampling", attr, coll.Programs["sample"], perfevent.AttachEach, nil)
		if err != nil {
			return err
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
			return err
		}
		*out.f = f
		s.OnClose("", f.close)
	}
	r.lost.Cumulative = o.Cumulative
	return s.Loop(ctx, what, func(final bool) error {
		mu.Lock()
		locked := true
		defer func() {
			if locked {
				mu.Unlock()
			}
		}()
		read()
		ps.collect()
		if final {
			ps.await(laneSmall, finalWait)
		}
		deferred.resolve(ps, final)
		if emitting {
			if lost, exact := records.LostEvents(); final && lost > 0 {
				atLeast := ""
				if !exact {
					atLeast = "at least "
				}
				fmt.Fprintf(s.Stderr, "%s: %s%d events lost: a ring buffer was full (a stricter --where keeps up)\n", o.tool(), atLeast, lost)
			}
			return nil
		}
		if err := r.drain(final); err != nil {
			return err
		}
		counted := r.take(final)
		if !final {
			// Kernel names take a pass over kallsyms: 10 to 20 s in the
			// 1-CPU guests beside two spinners, and the ring readers
			// waited for it: the deferred samples' ring overflowed and a
			// new process's first samples were cut short. (The final
			// report keeps the lock: no sample it has counted is added
			// twice, none added after it is missed.)
			mu.Unlock()
			locked = false
		}
		// An interval report the signal overtook is left out (the final
		// one, next, counts its samples): in a starved guest its pass over
		// kallsyms outlasted the 30 s the watchdog gives the ending.
		kctx := ctx
		if final {
			kctx = context.Background()
		}
		toName := []*held{counted}
		if final && r.whole != nil {
			toName = append(toName, r.whole)
		}
		err := r.resolveKernel(kctx, toName...)
		if !locked {
			mu.Lock()
			locked = true
		}
		r.printing = nil
		if !final && ctx.Err() != nil {
			r.putBack(counted)
			return nil
		}
		if err != nil {
			return err
		}
		return r.report(time.Now(), final, counted)
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

// fpFrames is the most user frames bpf_get_stack gives a key of n:
// the kernel cuts its walks at kernel.perf_event_max_stack (127 unless
// raised).
func fpFrames(n int) int {
	b, err := os.ReadFile("/proc/sys/kernel/perf_event_max_stack")
	if err != nil {
		return min(n, 127)
	}
	if m, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && m > 0 {
		return min(n, m)
	}
	return min(n, 127)
}

// contextLabels are the labels of the context a key carries.
func (r *reporter) contextLabels(pid uint32, raw []byte) []LabelValue {
	if !r.cfg.Context {
		return nil
	}
	id := binary.LittleEndian.Uint64(raw[r.cfg.ContextOffset():])
	if id == 0 {
		return nil
	}
	c, ok := r.contexts[id]
	if !ok {
		// New ids: read the table again.
		var k []byte
		var v uint64
		it := r.coll.Maps["contexts"].Iterate()
		for it.Next(&k, &v) {
			r.contexts[v] = bytes.Clone(k)
		}
		if c, ok = r.contexts[id]; !ok {
			return nil
		}
	}
	return contextLabels(c, r.ps.otelKeyNames(pid))
}

// stack is one counted stack, named.
type stack struct {
	Pid    uint32
	Comm   string
	Count  uint64
	User   []string // leaf first
	Kernel []string // leaf first
	// UserPC and KernelPC are the addresses of the frames, when the stack
	// is one key's (byAddress), for --pprof's locations.
	UserPC, KernelPC []uint64
	End              string // why the user stack ends: "" when complete (or unknown, with frame pointers)
	Labels           []LabelValue
}

// readAfterFP ends a stack whose walk could not read the stack after it
// stepped a frame by its frame pointer (auto).
const readAfterFP = "[unwind error: read after a frame-pointer step]"

// ends names each stop reason as the report shows it.
var ends = map[int32]string{
	prog.StopNoRow:       "[unwind error: no unwind row]",
	prog.StopUnsupported: "[unwind error: unsupported unwind rule]",
	prog.StopNoTable:     "[unwind error: no table]",
	prog.StopRead:        "[unwind error: read]",
	prog.StopTruncated:   "[truncated]",
	prog.StopNoRegs:      "[no user registers]",
}

// drainEvery is how often the kernel's counts move to user space between
// reports: each of its two hashes then holds the stacks of about a second
// (prog.CountsSwap), however long the run or its interval.
const drainEvery = time.Second

// maxHeld bounds the stacks a report (and the whole run's files) holds:
// keys packed to their frames (packKey), 8 bytes a frame: a stack of 30
// frames some 250 bytes, the deepest (64 kernel and 256 user frames)
// 2.6 KiB, 42 MiB if every stack were that deep.
// A sample of a new stack past it is counted as left out.
const maxHeld = 16384

// held is a table of counts by key, bounded by maxHeld.
type held struct {
	keys     map[stackKey]uint64
	leftOut  uint64 // samples of stacks that did not fit
	maxStack int
}

func newHeld() *held { return &held{keys: map[stackKey]uint64{}, maxStack: maxHeld} }

func (h *held) add(k stackKey, n uint64) {
	if _, ok := h.keys[k]; ok || len(h.keys) < h.maxStack {
		h.keys[k] += n
		return
	}
	h.leftOut += n
}

// drain moves the kernel's counts and the deferred samples' to the
// report's table (and the whole run's). Between reports it flips the
// hashes (loader.Swapped: exact, the programs running are waited out) and
// empties the one drained; the final report reads the hash the programs
// count in, and leaves it.
func (r *reporter) drain(final bool) error {
	hold := func(k []byte, n uint64) { r.hold(packKey(k, r.cfg), n) }
	var err error
	if final {
		for _, m := range r.swap.Currents() {
			if err = loader.Each(m, hold); err != nil {
				break
			}
		}
	} else {
		err = loader.Drain(r.swap, hold)
	}
	if err != nil {
		return fmt.Errorf("stack counts: %w", err)
	}
	r.lastDrain = time.Now()
	for k, n := range r.deferred.counts {
		r.hold(k, n)
	}
	clear(r.deferred.counts)
	if !final && time.Since(r.lastSweep) >= sweepEvery {
		// After a drain: every sample taken before a process's exit
		// notice was read is held now, its pid with it.
		r.lastSweep = time.Now()
		r.ps.sweep(r.coll.Maps["seen"], r.coll.Maps["labels"], r.countedPids())
	}
	return nil
}

// countedPids says which pids the counts held refer to: those of the
// tables, the report being named, and the deferred samples.
func (r *reporter) countedPids() func(uint32) bool {
	pids := map[uint32]bool{}
	for _, h := range []*held{r.cur, r.whole, r.printing} {
		if h == nil {
			continue
		}
		for k := range h.keys {
			pids[binary.LittleEndian.Uint32([]byte(k[:4]))] = true
		}
	}
	for _, d := range r.deferred.pending {
		pids[d.pid] = true
	}
	for id := range r.deferred.stacks {
		pids[id.pid] = true
	}
	return func(pid uint32) bool { return pids[pid] }
}

// drainDue drains if drainEvery has passed since the last drain.
func (r *reporter) drainDue() error {
	if r.swap == nil || time.Since(r.lastDrain) < drainEvery {
		return nil
	}
	return r.drain(false)
}

// nextDue is how long the notices' reader may wait for the next of its
// own work: a rescan due at rescan (if not zero), the deferred samples'
// deadline, the next drain; at most drainEvery, at least a millisecond.
func (r *reporter) nextDue(rescan time.Time) time.Duration {
	now := time.Now()
	due := now.Add(drainEvery)
	if r.swap != nil {
		due = r.lastDrain.Add(drainEvery)
	}
	if !rescan.IsZero() && rescan.Before(due) {
		due = rescan
	}
	if d := r.deferred; len(d.pending) > 0 && d.next.Before(due) {
		due = d.next
	}
	return max(due.Sub(now), time.Millisecond)
}

func (r *reporter) hold(k stackKey, n uint64) {
	r.cur.add(k, n)
	if r.whole != nil {
		r.whole.add(k, n)
	}
}

// take is the table a report prints. At the end, or where reports do not
// start again (--cumulative), the one drains add to (between reports a
// copy: the report names it unlocked, while the drains go on); else the
// one since the last report, and a new one takes its place.
func (r *reporter) take(final bool) *held {
	cur := r.cur
	switch {
	case final:
		return cur
	case r.o.Cumulative:
		return &held{keys: maps.Clone(cur.keys), leftOut: cur.leftOut, maxStack: cur.maxStack}
	}
	r.cur = newHeld()
	r.printing = cur
	return cur
}

// putBack returns the counts of a report not printed (the run ended
// while it named them) to the next one.
func (r *reporter) putBack(h *held) {
	if r.o.Cumulative || h == r.cur {
		return
	}
	for k, n := range h.keys {
		r.cur.add(k, n)
	}
	r.cur.leftOut += h.leftOut
}

// stacks names the counts held for the report (their kernel addresses
// resolved), and returns the samples lost since the last report: the
// kernel's (a full hash), the deferrer's, and those left out of the
// table.
func (r *reporter) stacks(h *held) (report []stack, lost uint64, err error) {
	total, err := counts.ReadPerCPUCounter(r.coll.Maps["lost"])
	if err != nil {
		return nil, 0, err
	}
	return r.named(h.keys, false), r.lost.Counter(total+r.deferred.lost) + h.leftOut, nil
}

// resolveKernel names the kernel addresses not named yet, at report time
// (the run itself keeps no kernel symbols): by the kernel's own lookup
// (kernel.SymbolNames), or in one pass over kallsyms before 5.13.
func (r *reporter) resolveKernel(ctx context.Context, tables ...*held) error {
	var todo []uint64
	seen := map[uint64]bool{}
	for _, h := range tables {
		for k := range h.keys {
			for _, pc := range k.decode(r.cfg).Kernel {
				if _, ok := r.kernel[pc]; !ok && !seen[pc] {
					seen[pc] = true
					todo = append(todo, pc)
				}
			}
		}
	}
	if len(todo) == 0 {
		return nil
	}
	// The kernel names them (5.13+); else one pass over kallsyms.
	names, err := kernel.SymbolNames(todo)
	hidden := false
	if err != nil {
		if names, hidden, err = procfs.KernelFunctions(ctx, todo); err != nil {
			return err
		}
	}
	if hidden && !r.warned {
		r.warned = true
		fmt.Fprintf(r.s.Stderr, "%s: kernel addresses are hidden (kptr_restrict, or not root): kernel frames print as [unknown]\n", r.o.tool())
	}
	for _, pc := range todo {
		r.kernel[pc] = names[pc] // "" when unknown
	}
	return nil
}

// sigreturnNames are the signal return trampolines' names: glibc's and
// musl's (named by their code where no symbol names them), and arm64's
// and riscv64's vdso's.
var sigreturnNames = map[string]bool{"__restore_rt": true, "__kernel_rt_sigreturn": true, "__vdso_rt_sigreturn": true}

// IsSigreturn says whether a user frame's name is a signal return
// trampoline's: the frame above it is the one the signal interrupted.
func IsSigreturn(name string) bool { return sigreturnNames[name] }

// userFrames names a key's user frames, innermost first, and says how the
// walk ended ("" when whole).
func (r *reporter) userFrames(k decodedKey) (user []string, end string) {
	end = ends[int32(k.Stop)]
	if int32(k.Stop) == prog.StopNoRow && len(k.User) > 1 && r.ps.afterEntry(k.Pid, k.User[len(k.User)-1]) {
		end = "" // the process's first frame: its loader's _start has no row
	}
	switch {
	case end == "" && k.FP:
		end = "[frame pointers]" // whole, if the frame pointers were what they seemed
	case int32(k.Stop) == prog.StopFP && r.fpFrames > 0 && len(k.User) >= r.fpFrames:
		end = ends[prog.StopTruncated]
	case int32(k.Stop) == prog.StopRead && k.FP:
		// auto stepped a frame of a file whose table is not loaded (yet)
		// by its frame pointer, and what it took for one was not.
		end = readAfterFP
	}
	for i, pc := range k.User {
		// The sampled pc, and the one a signal interrupted (after the
		// trampoline's frame), are the instruction itself.
		ret := i > 0 && !sigreturnNames[user[i-1]]
		user = append(user, r.ps.symbolize(k.Pid, pc, ret))
	}
	return user, end
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

// named turns counted keys into stacks of frame names. Keys differ by
// every address; stacks are reported by their names (two samples at
// different instructions of one function are one stack), but byAddress
// keeps each key a stack of its own, with its addresses.
func (r *reporter) named(counts map[stackKey]uint64, byAddress bool) []stack {
	byName := map[string]*stack{}
	for packed, n := range counts {
		if n == 0 {
			continue
		}
		raw := packed.raw(r.cfg)
		k := decodeKey(raw, r.cfg)
		user, end := r.userFrames(k)
		st := stack{Pid: k.Pid, Comm: r.ps.comm(k.Pid), Count: n, End: end, User: user,
			Labels: append(decodeLabels(r.o.Labels, r.cfg, raw), r.contextLabels(k.Pid, raw)...)}
		for _, pc := range k.Kernel {
			// The function, not the instruction: "vfs_read", as BCC and perf.
			name := r.kernel[pc]
			if name == "" {
				name = "[unknown]"
			}
			st.Kernel = append(st.Kernel, name)
		}
		if k.KernErr != 0 {
			st.Kernel = append(st.Kernel, "[kernel stack lost]")
		}
		name := string(packed)
		if byAddress {
			st.UserPC, st.KernelPC = k.User, k.Kernel
		} else {
			name = fmt.Sprint(st.Pid, st.User, st.Kernel, st.End, labelsName(st.Labels))
		}
		if have := byName[name]; have != nil {
			have.Count += n
			continue
		}
		byName[name] = &st
	}
	out := make([]stack, 0, len(byName))
	for _, st := range byName {
		out = append(out, *st)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Count != b.Count {
			return a.Count < b.Count
		}
		if a.Pid != b.Pid {
			return a.Pid < b.Pid
		}
		return strings.Join(a.User, ";")+strings.Join(a.Kernel, ";") < strings.Join(b.User, ";")+strings.Join(b.Kernel, ";")
	})
	return out
}

func (r *reporter) report(now time.Time, final bool, counted *held) error {
	stacks, lost, err := r.stacks(counted)
	if err != nil {
		return err
	}
	if final {
		whole, all := counted, stacks
		if r.whole != nil {
			whole, all = r.whole, r.named(r.whole.keys, false)
		}
		// The files hold the whole run, whatever the interval reports showed.
		if r.pprof != nil {
			if err := r.pprof.write(func(w io.Writer) error {
				return writePprof(w, r.named(whole.keys, true), r.ps, r.o.Frequency, r.o.OffCPU, r.start, now.Sub(r.start))
			}); err != nil {
				return err
			}
		}
		if r.svg != nil {
			title := fmt.Sprintf("profile: %d Hz, %s", r.o.Frequency, now.Sub(r.start).Round(time.Millisecond))
			unit := "samples"
			if r.o.OffCPU {
				title = fmt.Sprintf("profile --off-cpu: %s, in microseconds", now.Sub(r.start).Round(time.Millisecond))
				unit = "us"
			}
			drawn := r.weighed(all)
			if len(r.o.SVGLabels) > 0 {
				drawn = withLabels(all, r.o.SVGLabels)
				title += ", " + labelsTitle(r.o.SVGLabels)
				if len(drawn) == 0 {
					fmt.Fprintf(r.s.Stderr, "profile: --svg-label %s: no sample carried it; %s has an empty graph\n", labelsTitle(r.o.SVGLabels), r.o.SVG)
				}
			}
			if err := r.svg.write(func(w io.Writer) error { return writeSVG(w, drawn, title, unit) }); err != nil {
				return err
			}
		}
	}
	stacks = r.weighed(stacks)
	var b strings.Builder
	switch {
	case r.o.JSON:
		return r.writeJSON(now, stacks, lost)
	case r.o.Folded:
		writeFolded(&b, stacks)
	default:
		r.s.BeginText(&b, now)
		writeStacks(&b, stacks)
		r.summary(&b, stacks, lost)
	}
	_, err = io.WriteString(r.s.Stdout, b.String())
	return err
}

// weighed gives stacks their reports' weights: off-CPU, the counts are
// nanoseconds, reported in microseconds (as offcputime), and a stack of
// less than one is left out; samples are samples.
func (r *reporter) weighed(stacks []stack) []stack {
	if !r.o.OffCPU {
		return stacks
	}
	out := make([]stack, 0, len(stacks))
	for _, st := range stacks {
		st.Count = (st.Count + 500) / 1000
		if st.Count > 0 {
			out = append(out, st)
		}
	}
	return out
}

// writeStacks prints each stack as BCC's profile does: kernel frames, "--",
// user frames (each leaf first), then "- comm (pid)" and the count; the
// hottest stack last, nearest the prompt.
func writeStacks(w *strings.Builder, stacks []stack) {
	for _, st := range stacks {
		for _, f := range st.Kernel {
			fmt.Fprintf(w, "    %s\n", terminal.Printable(f))
		}
		if len(st.Kernel) > 0 && (len(st.User) > 0 || st.End != "") {
			w.WriteString("    --\n")
		}
		for _, f := range st.User {
			fmt.Fprintf(w, "    %s\n", terminal.Printable(f))
		}
		if st.End != "" {
			fmt.Fprintf(w, "    %s\n", st.End)
		}
		if len(st.Labels) > 0 {
			var ls []string
			for _, l := range st.Labels {
				v := l.Value
				if l.Num == nil {
					v = strconv.Quote(v)
				}
				ls = append(ls, l.Name+"="+v)
			}
			fmt.Fprintf(w, "    [%s]\n", terminal.Printable(strings.Join(ls, " ")))
		}
		fmt.Fprintf(w, "    %-16s %s (%d)\n        %d\n\n", "-", terminal.Printable(st.Comm), st.Pid, st.Count)
	}
}

// writeFolded prints "comm;root;...;leaf count" lines, user frames then
// kernel frames (suffixed _[k], as flamegraph.pl colours them); a stack that
// ended early starts with its marker.
func writeFolded(w *strings.Builder, stacks []stack) {
	for _, st := range stacks {
		frames := []string{foldName(st.Comm)}
		for _, l := range st.Labels {
			frames = append(frames, foldName("["+l.Name+"="+l.Value+"]"))
		}
		if st.End != "" {
			frames = append(frames, st.End)
		}
		for i := len(st.User) - 1; i >= 0; i-- {
			frames = append(frames, foldName(st.User[i]))
		}
		for i := len(st.Kernel) - 1; i >= 0; i-- {
			frames = append(frames, foldName(st.Kernel[i])+"_[k]")
		}
		fmt.Fprintf(w, "%s %d\n", strings.Join(frames, ";"), st.Count)
	}
}

// foldName keeps a frame on its line and out of the separators.
func foldName(s string) string {
	return strings.Map(func(r rune) rune {
		if r == ';' || r == '\n' || r == '\r' || r == ' ' || r < 0x20 || r == 0x7f {
			return '_'
		}
		return r
	}, s)
}

// summary says how many samples were counted and how their user stacks
// ended.
func (r *reporter) summary(w *strings.Builder, stacks []stack, lost uint64) {
	var samples, complete uint64
	byEnd := map[string]uint64{}
	for _, st := range stacks {
		samples += st.Count
		if st.End == "" {
			complete += st.Count
		} else {
			byEnd[st.End] += st.Count
		}
	}
	full := fmt.Sprintf("more stacks than a table holds: %d a second, %d a report", prog.MaxStacks, maxHeld)
	if r.cfg.ShortKeySize() > 0 {
		full = fmt.Sprintf("more stacks than a table holds: %d a second (%d of over %d user frames), %d a report", prog.MaxStacks, prog.MaxDeepStacks, prog.ShortUserFrames, maxHeld)
	}
	unit := r.o.unit()
	if r.o.OffCPU {
		// Counts are microseconds waited; what is lost is waits.
		unit, full = "us waited", full+"; or the table of waiting threads is full"
	}
	fmt.Fprintf(w, "%d %s, %d stacks", samples, unit, len(stacks))
	if r.o.Unwind != prog.UnwindFP && samples > 0 {
		fmt.Fprintf(w, "; user stacks complete: %d (%.1f%%)", complete, 100*float64(complete)/float64(samples))
	}
	if lost > 0 {
		fmt.Fprintf(w, "; %d more lost (%s)", lost, full)
	}
	w.WriteString("\n")
	var names []string
	for e := range byEnd {
		names = append(names, e)
	}
	sort.Strings(names)
	for _, e := range names {
		fmt.Fprintf(w, "  %s: %d\n", e, byEnd[e])
	}
	for _, why := range r.ps.labelNotes {
		fmt.Fprintf(w, "  unset: %s\n", terminal.Printable(why))
	}
	if r.o.Unwind != prog.UnwindFP {
		files, rows, used := r.ps.tableStats()
		fmt.Fprintf(w, "unwind tables: %d files, %d rows (%.1f of %d MiB), read in %d ms",
			files, rows, float64(used*8)/(1<<20), r.o.Budget, r.ps.loadTime.Milliseconds())
		if r.ps.preloaded > 0 {
			fmt.Fprintf(w, "; %d files of the command read before it started", r.ps.preloaded)
		}
		if r.ps.full > 0 {
			fmt.Fprintf(w, "; %d files left out: the table is full (--table-mib)", r.ps.full)
		}
		w.WriteString("\n")
		if r.ps.deferLost > 0 {
			fmt.Fprintf(w, "  %d samples not deferred: profile read the deferred samples too slowly (their ring was full); counted as far as the kernel walked them\n", r.ps.deferLost)
		}
		if r.ps.denied > 0 {
			n := fmt.Sprintf("%d processes", r.ps.denied)
			if r.ps.denied == 1 {
				n = "1 process"
			}
			fmt.Fprintf(w, "  %s unreadable: another user's, or holding capabilities profile lacks (CAP_SYS_PTRACE, or root, reads them): user stacks by frame pointers, unnamed\n", n)
		}
		for _, why := range r.ps.refused {
			fmt.Fprintf(w, "  table refused: %s\n", terminal.Printable(why))
		}
	}
}

// JSONStack is a stack of a --json report, as the tools print it.
type JSONStack struct {
	Pid    uint32   `json:"pid"`
	Comm   string   `json:"comm"`
	Count  uint64   `json:"count"`
	User   []string `json:"user"`
	Kernel []string `json:"kernel"`
	End    string   `json:"end"`
	// Labels are the --label values the stack was sampled under, and its
	// context's: numbers for integers, strings for strings; unset ones are
	// left out.
	Labels map[string]any `json:"labels,omitempty"`
}

func (r *reporter) writeJSON(now time.Time, stacks []stack, lost uint64) error {
	// Off-CPU, counts are microseconds: "usecs" holds their sum, and
	// "lost" counts waits.
	out := struct {
		Tool    string      `json:"tool"`
		Time    string      `json:"time"`
		Samples *uint64     `json:"samples,omitempty"`
		Events  *uint64     `json:"events,omitempty"` // filter's --count-by ustack
		Usecs   *uint64     `json:"usecs,omitempty"`
		Lost    uint64      `json:"lost"`
		Stacks  []JSONStack `json:"stacks"`
		Refused []string    `json:"refused"` // files whose tables were past the parse's limits, and why
		// NotDeferred: samples the full deferred ring turned away since the
		// start (counted as far as the kernel walked them).
		NotDeferred uint64 `json:"not_deferred,omitempty"`
	}{Tool: r.o.tool(), Time: run.JSONTime(now), Lost: lost, Stacks: []JSONStack{}, Refused: append([]string{}, r.ps.refused...), NotDeferred: r.ps.deferLost}
	var total uint64
	if r.o.OffCPU {
		out.Usecs = &total
	} else if r.o.Event != nil {
		out.Events = &total
	} else {
		out.Samples = &total
	}
	for i := len(stacks) - 1; i >= 0; i-- {
		st := stacks[i]
		total += st.Count
		end := st.End
		if end == "[frame pointers]" {
			end = "frame pointers"
		}
		if end == "" {
			end = "complete"
			if r.o.Unwind == prog.UnwindFP {
				end = "frame pointers"
			}
		}
		js := JSONStack{Pid: st.Pid, Comm: st.Comm, Count: st.Count, User: nonNil(st.User), Kernel: nonNil(st.Kernel), End: end}
		if len(st.Labels) > 0 {
			js.Labels = map[string]any{}
			for _, l := range st.Labels {
				if l.Num != nil {
					js.Labels[l.Name] = *l.Num
				} else {
					js.Labels[l.Name] = l.Value
				}
			}
		}
		out.Stacks = append(out.Stacks, js)
	}
	return r.s.WriteJSON(out)
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// haveBigKeys reports whether a hash map takes the full key (6.1 does;
// 5.10 limits hash keys to MAX_BPF_STACK, 512 bytes).
func haveBigKeys() bool {
	return kernel.HashKeyFits(prog.Config{KernelDepth: prog.KernelFrames, UserDepth: prog.UserFrames}.KeySize())
}

// taskExit places the count of a process's live threads: task_struct.signal,
// signal_struct.live (BTF).
func taskExit() (*prog.TaskExit, error) {
	signal, err := kbtf.MemberOffset("task_struct", "signal")
	if err != nil {
		return nil, fmt.Errorf("task_struct.signal: %w", err)
	}
	live, err := kbtf.MemberOffset("signal_struct", "live")
	if err != nil {
		return nil, fmt.Errorf("signal_struct.live: %w", err)
	}
	return &prog.TaskExit{Signal: signal, Live: live}, nil
}

// threadPointer is the offset of the thread pointer in task_struct, from
// the kernel's BTF: the base of the thread-locals.
func threadPointer() (int, error) {
	path := prog.ThreadPointerMember[runtime.GOARCH]
	if path == "" {
		return 0, fmt.Errorf("--label tls: thread-locals are read on x86-64 and arm64 only")
	}
	off, err := kbtf.MemberPathOffset("task_struct", path)
	if err != nil {
		return 0, fmt.Errorf("--label tls: the thread pointer's place in task_struct: %w", err)
	}
	return off, nil
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
