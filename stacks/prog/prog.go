// Package prog builds profile's programs: a perf_event sampler that keys
// each sample by its kernel and user stacks, the user stack unwound in the
// kernel by frame pointers or by the unwind tables profile loads (a
// tail-called unwinder), and an exec hook that forgets replaced images.
package prog

import (
	"errors"
	"fmt"
	"math/bits"

	"github.com/cilium/ebpf"
	bpf "github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/perfevent"
	"github.com/tracekit/tracekit/proctree"
	"github.com/tracekit/tracekit/unwind"
)

// The per-CPU scratch value: the unwinder's state, then the count key,
// used from there as the key of the counts hash: the program counters
// themselves, so that two stacks are never merged by a stack-id hash
// collision. The key's depths are the config's (kernels before 5.11 take
// hash keys of at most 512 bytes).
const (
	statePC   = 0
	stateSP   = 8
	stateBP   = 16
	stateN    = 24 // frames stored so far
	stateRA   = 32 // u32: 1 if pc is a return address (its call is at pc-1), 0 if it is where the code was stopped
	stateWait = 36 // u32, off-CPU: not 0 if the thread goes to sleep (prev_state has a flag), 0 if it is preempted
	// The mapping of the last frame looked up (its value in the mappings
	// trie): a frame in the same mapping, as most of a stack's are, needs
	// no trie lookup. Empty (length 0) at the start of each walk.
	stateMapStart = 40 // u64
	stateMapLen   = 48 // u64: End - Start
	stateMapBias  = 56 // u64
	stateMapFirst = 64 // u32: its file's first row
	stateMapCount = 68 // u32: its rows (0: none)
	stateRegs     = 72 // a copy of the task's user pt_regs (arm64: of x29 to pstate, see armRegs)
	ptRegsLen     = asm.AMD64Size
	// stateLR is arm64's x30 in the walk: the return address of a frame
	// that has not saved it yet, known where pc is exact (the sampled
	// frame, and one a signal interrupted). In the room of the registers'
	// copy, past arm64's, below the deferred header.
	stateLR = stateRegs + 64

	keyBase    = stateRegs + ptRegsLen
	keyPid     = keyBase     // u32 tgid
	keyStop    = keyBase + 4 // u8: why the user stack ends (see stop*)
	keyKernErr = keyBase + 5 // u8: 1 if the kernel stack could not be read
	keyFP      = keyBase + 7 // u8: 1 if a frame was stepped by its frame pointer (auto)

	// A deferred sample (see deferred): the header, over the end of the
	// pt_regs copy (read before the walk), then the key, the context, and
	// the copy of the user stack, sent to user space as one record.
	deferHeader = keyBase - DeferHeaderSize
	// StackCopy is the most user stack a deferred sample copies, as
	// perf's default dump (8 KiB).
	StackCopy = 8192

	// The depths where the kernel allows big hash keys, and where not.
	KernelFrames      = 64  // kernel frames kept (perf_event stacks rarely pass 40)
	UserFrames        = 256 // user frames kept: framesPerProg a program, 32 programs (the tail-call limit, 32 before 5.17 and 33 since)
	SmallKernelFrames = 16
	SmallUserFrames   = 46 // 8 + 8*(16+46) = 504 bytes of key
	ShortUserFrames   = 64 // the short counts' keys (ShortKeySize): 8 + 8*(64+64) = 1032 bytes and the labels

	framesPerProg = 8 // frames one unwind program walks before it tail-calls itself
)

// Why a user stack ends. The first values are the table's own (unwind.Stop).
const (
	StopNoRow       = int32(unwind.StopNoRow)
	StopEnd         = int32(unwind.StopEnd)
	StopUnsupported = int32(unwind.StopUnsupported)
	StopNoTable     = 4 // the address is in no file whose table is loaded
	StopRead        = 5 // the stack could not be read
	StopTruncated   = 6 // the key's user frames are full, or the tail-call limit
	StopNoRegs      = 7 // no user registers (a kernel thread, or a kernel-mode sample before 5.15)
	StopFP          = 8 // frame pointers: bpf_get_stack's walk, which says nothing of how it ended
	// StopDeferred marks an off-CPU stash whose stack went to user space
	// (EventStack): its wait is sent to user space too (EventWaited), and
	// no count has this stop.
	StopDeferred = 9
)

// The table unwinder reads x86-64's registers (asm.AMD64: ip, sp, bp,
// and the code segment that tells user registers from kernel ones). The
// kernel stack's size (THREAD_SIZE without KASAN) and the user code
// segment (__USER_CS) are x86-64's too.
const (
	threadSize = 16384
	userCS     = 0x33
)

var regs = asm.AMD64

// Stack slots of the programs.
const (
	fpCtx     = -8   // the context, kept across helper calls
	fpTgid    = -12  // u32 tgid, the key of seen
	fpZero    = -16  // u32 0, the key of scratch, progs and lost
	fpLPM     = -32  // 16 bytes: {u32 prefixlen; u32 pid (BE); u64 address (BE)}
	fpSearch  = -36  // u32: the row-search key
	fpRule    = -48  // u64: the row's rule
	fpCFA     = -56  // u64: the frame's CFA
	fpRead    = -72  // 16 bytes read from the user stack
	fpLookup  = -80  // u64: the address looked up (pc, or pc-1 for a return address)
	fpNow     = -88  // u64: the value of a new seen entry
	fpOne     = -104 // u64: 1, the value of a new count
	fpEvent   = -120 // 16 bytes: {u32 tgid; u32 kind; u64 address} sent to user space
	fpTP      = -128 // u64: the sampled thread's thread pointer (labels)
	fpMapHead = -152 // 24 bytes: a strobe map's {id, cnt, tag} (labels)
	fpMap     = -160 // u64: a strobe map's address (labels)
	fpRecord  = -192 // 32 bytes: a context record's header, or a custom label (labels)
	fpCtxID   = -200 // u64: a context's id (labels)
	EventNew  = 1    // a process seen for the first time
	EventExit = 3    // a process seen before exited: its pid may come again, another process
	// EventStack is a deferred sample: an address in no file whose table
	// (or lack of one) the unwinder knows yet, typically a process's first
	// milliseconds. Its record is the header {u32 tgid; u32 kind; u64
	// lookup, pc, sp, bp, lr (arm64's x30; not set on x86-64), len}, the key as far as the kernel walked it (its
	// last user frame the pc), the context (Config.Context), and len bytes
	// of the user stack from sp (StackCopy bytes sent): user space unwinds
	// it once the file's table is read, and counts it.
	EventStack      = 4
	DeferHeaderSize = 56
)

// MappingSize is the mappings trie's value: {u32 first row; u32 rows;
// u64 bias; u64 start; u64 end} of the mapping the prefix is part of.
const MappingSize = 32

// The counts are two hashes of the same keys: the programs count in the
// one gen[0] names (0: counts, 1: CountsSwap) while user space drains the
// other (loader.Swapped), so that neither holds more than the stacks of
// about a second, however long the run.
const (
	CountsSwap = "counts1"
	GenMap     = "gen"
	// ShortCounts and ShortSwap are the same two hashes for the keys of
	// ShortUserFrames user frames or fewer (ShortKeySize), where the key
	// keeps more: counts and CountsSwap then hold the deeper ones.
	ShortCounts = "short"
	ShortSwap   = "short1"
)

// Map sizes.
const (
	MaxStacks     = 4096 // each of the two counts hashes (the short ones, where there are)
	MaxDeepStacks = 1024 // each of the two counts hashes of deeper keys, where there are short ones
	maxSeen       = 16384
	maxMappings   = 65536 // LPM prefixes, about 20 per mapped file
)

// Unwind modes.
const (
	UnwindFP   = "fp"
	UnwindEH   = "eh"
	UnwindAuto = "auto"
)

// Config says which programs to build.
type Config struct {
	// KernelDepth and UserDepth are the frames a key keeps.
	KernelDepth, UserDepth int
	Mode                   string         // UnwindFP, UnwindEH or UnwindAuto
	Pid                    int            // -p: only this process
	Tree                   *proctree.Tree // -c: the process tree in proctree.PidsMap
	Idle                   bool           // -I: sample the idle task too
	// NS: this runs in a pid namespace of its own. Pid, the keys and the
	// processes user space reads are that namespace's pids; samples of
	// tasks outside it are dropped (their maps cannot be read from here).
	NS       *asm.PidNS
	Rows     int  // the row table's budget: the most rows it may hold
	TaskRegs bool // bpf_task_pt_regs (5.15+): user registers of a kernel-mode sample
	// LazyHashes: the hash maps allocate entries as they are inserted
	// (6.1+ for perf_event programs), not all of them at load: the counts
	// alone are 6 MiB of kernel memory cleared at every start.
	LazyHashes bool
	// TaskStack, without TaskRegs, is the offset of task_struct.stack: the
	// user registers are at the top of the task's kernel stack. 0: unknown.
	TaskStack int
	Readers   asm.Readers
	// Labels are read at each sample into the key (see labels.go);
	// ThreadPointer is the offset of the thread pointer in task_struct
	// (x86-64 thread.fsbase, arm64 thread.uw.tp_value), for thread-locals.
	Labels        []Label
	ThreadPointer int // see ThreadPointerMember
	// Context: the OpenTelemetry thread context and custom labels are read
	// at each sample too (see context.go).
	Context bool
	// Exit, when known, places task_struct.signal and signal_struct.live:
	// a process's last exiting thread forgets it (see exitProg).
	Exit *TaskExit
	// StartStack, when known, places task_struct.mm and
	// mm_struct.start_stack: a deferred sample of a process's first thread
	// copies its stack up to where it started, no more (the strings and
	// the auxiliary vector above it can make a fixed size unreadable).
	StartStack *TaskStartStack
	// OffCPU: the programs count the time threads wait, at
	// sched:sched_switch, not samples (see offcpu.go).
	OffCPU *OffCPU
	// Arch: whose registers and rule words the unwinder reads.
	Arch Arch
	// RawEvents: the exec program (which reads no record: the task is
	// the current one) is a raw tracepoint's (4.17+), whose link detaches
	// without waiting out a grace period as a perf event's close does
	// (see proctree.Tree). The exit program stays a perf tracepoint's: a
	// perf event's program runs holding bpf_prog_active, so the CPU-clock
	// sampler cannot run inside it and put the exiting process back in
	// seen between its deletes; a raw tracepoint's does not hold it (the
	// 7.2 guest's TestLabelsForgottenAtExit: seen kept the pid).
	RawEvents bool
	// Event: the program runs at an event (filter's --count-by ustack),
	// not at a CPU-clock sample.
	Event *Event
}

// Arch is a CPU whose frames the unwinder steps.
type Arch int

const (
	X86_64 Arch = iota // unwind.X86_64's rule words
	ARM64              // unwind.ARM64's: the return address in x30 until saved
	// RISCV64 takes arm64's words (unwind.RISCV64), ra for x30 and s0
	// for x29, and one of its own (unwind.SavesFP).
	RISCV64
)

// ArchOf is the Arch of a GOARCH; false where the unwinder steps no
// frames (profile walks frame pointers only there).
func ArchOf(goarch string) (Arch, bool) {
	switch goarch {
	case "amd64":
		return X86_64, true
	case "arm64":
		return ARM64, true
	case "riscv64":
		return RISCV64, true
	}
	return 0, false
}

// linkRegister: the return address is in a register (x30, ra) until a
// frame saves it, and the rule words are unwind's encodeLR's.
func (a Arch) linkRegister() bool { return a != X86_64 }

// Event is an event the sampler runs at instead of the CPU clock: its
// program type (the unwinder tail-called is of that type too), and the
// filter that runs first.
type Event struct {
	Type ebpf.ProgramType // ebpf.Kprobe (kprobes, uprobes, USDT) or ebpf.TracePoint
	// Regs: the context is the probe's pt_regs, the user's registers at a
	// uprobe (a kprobe's are the kernel's: its code segment says so, and
	// the task's user registers are read as a kernel-mode sample's are).
	// Else (a tracepoint's record) the user registers are always the task's.
	Regs bool
	// Gate saves the context in asm.RegCtx (asm.Prologue) and jumps to
	// "exit" to drop the event; what passes falls through.
	Gate bpf.Instructions
	// Emit: each event is sent to user space (RecordsMap), its key (the
	// stacks) and Record bytes the gate left on the stack at RecordAt (a
	// printed event's other fields, below the slots the sampler uses:
	// -160 and down), instead of counted.
	Emit     bool
	Record   int
	RecordAt int16
}

// ErrNoUserRegs: at a tracepoint the user's registers are the task's,
// which a program reads through bpf_task_pt_regs (5.15+), or on x86-64
// at the top of the task's kernel stack; arm64 before 5.15 has no way.
var ErrNoUserRegs = errors.New("this kernel gives a tracepoint's program no way to the user's registers (bpf_task_pt_regs, Linux 5.15+): probe a user-space function (uprobe:) for its stacks")

// RecordsMap is the ring of emitted events (Event.Emit): each record the
// key, the context when read, then the gate's record (RecordOffset).
const RecordsMap = "records"

// RecordOffset is where an emitted event's record (Event.Record bytes)
// begins, in what the records ring and a deferred sample carry from the
// key on.
func (c Config) RecordOffset() int {
	n := c.KeySize()
	if c.Context {
		n += ContextSize
	}
	return n
}

// emitSize is what an emitted event sends from the key on.
func (c Config) emitSize() int { return c.RecordOffset() + c.record() }

// record is the room of an emitted event's record, 8-byte aligned.
func (c Config) record() int {
	if c.Event == nil {
		return 0
	}
	return (c.Event.Record + 7) &^ 7
}

// StackEvent is an event whose passing occurrences are counted by their
// user stacks (filter's --count-by ustack) by profile's sampler: its
// program (Event), how it attaches, and what the reports call it. It is
// here, under both tools, because no tool imports another: the binary
// hands filter profile's counter (see filter.CountStacks).
type StackEvent struct {
	Event
	Name   string // the event as the user wrote it
	Kernel bool   // the kernel stack is part of the key too (kstack)
	// All: with -c, every process's events, not only the command's tree.
	All    bool
	Attach func(*ebpf.Program) error
	// Print, with Event.Emit, prints an event: its ring sample (time,
	// CPU, pid and tid; Raw is the gate's record), and its stacks.
	Print func(smp perfevent.Sample, st Stack)
}

// Stack is an emitted event's stacks: the user frames named, innermost
// first, how the walk ended ("" when whole), and the kernel's return
// addresses (named by the caller, as its other kernel frames are).
type Stack struct {
	Comm   string // the process's, as profile knows it (the event may outlive it)
	User   []string
	End    string
	Kernel []uint64
}

// TaskStartStack is where the kernel keeps a process's initial stack
// pointer: the offsets of task_struct.mm and mm_struct.start_stack.
type TaskStartStack struct{ MM, StartStack int }

// TaskExit is where the kernel counts a process's live threads: the
// offsets of task_struct.signal and of signal_struct.live.
type TaskExit struct{ Signal, Live int }

// fences is how many block addresses the fences map holds: one for each
// block of the row table, rounded up to a power of two (the search masks
// its index with fences-1).
func (c Config) fences() int {
	n := 1
	for n < c.Rows/unwind.BlockRows {
		n *= 2
	}
	return n
}

// ChunkBlocks is how many blocks of rows one chunk of the row table
// holds: 4 MiB (or the whole budget, when smaller). The table takes
// kernel memory a chunk at a time, as files are loaded.
func (c Config) ChunkBlocks() int { return min(maxChunkBlocks, c.fences()) }

const maxChunkBlocks = 4 << 20 / (8 * unwind.BlockRows)

// RowChunk is the spec of one chunk of the row table: an array of blocks
// of rows, a value of the "rows" array of maps.
func (c Config) RowChunk() *ebpf.MapSpec {
	return &ebpf.MapSpec{Name: "profile_rows", Type: ebpf.Array, KeySize: 4, ValueSize: 8 * unwind.BlockRows, MaxEntries: uint32(c.ChunkBlocks())}
}

func (c Config) chunkShift() int { return bits.TrailingZeros(uint(c.ChunkBlocks())) }

func (c Config) keyUser() int { return keyBase + c.UserOffset() }

// KernelOffset and UserOffset are where a key's kernel and user frames
// begin (from the key's start): after its header and its labels, so that
// a key's first bytes, up to ShortUserFrames user frames, are a short
// key (ShortKeySize).
func (c Config) KernelOffset() int { return 8 + c.labelsSize() }
func (c Config) UserOffset() int   { return c.KernelOffset() + 8*c.KernelDepth }

// KeySize is the counts key's size: pid, stop, kernel error, the label
// bits, the labels, then the frames.
func (c Config) KeySize() int { return 8 + c.labelsSize() + 8*(c.KernelDepth+c.UserDepth) }

// MaxStacks is how many keys each of the two counts hashes takes:
// MaxDeepStacks where the short hashes take the rest.
func (c Config) MaxStacks() int {
	if c.ShortKeySize() > 0 {
		return MaxDeepStacks
	}
	return MaxStacks
}

// ShortKeySize is the size of the short counts' keys (ShortCounts): the
// first ShortUserFrames user frames of a key, which has no more; 0 when
// every key is that short.
func (c Config) ShortKeySize() int {
	if c.UserDepth <= ShortUserFrames {
		return 0
	}
	return c.UserOffset() + 8*ShortUserFrames
}
func (c Config) scratchSize() int {
	n := keyBase + c.KeySize()
	if c.Context {
		n += ContextSize // the context read, after the key
	}
	n += c.record() // an emitted event's record, after them
	if c.Mode != UnwindFP {
		if c.OffCPU != nil {
			n += 8 // a deferred wait's switch-out time (WaitTime)
		}
		n += StackCopy // a deferred sample's stack
	}
	return n
}

// stackOff is where a deferred sample's copy of the stack is in the scratch value.
func (c Config) stackOff() int { return c.scratchSize() - StackCopy }

// waitTimeOff is where an off-CPU scratch value keeps the switch-out
// time of a deferred wait, just before the stack's copy: in the record.
func (c Config) waitTimeOff() int { return c.stackOff() - 8 }

// WaitTime is where a deferred off-CPU record has its switch-out time.
func (c Config) WaitTime() int { return c.waitTimeOff() - deferHeader }

// DeferredSize is the size of a deferred sample's record with a whole
// copy of the stack (StackCopy bytes); a record is as long as its copy.
func (c Config) DeferredSize() int { return c.scratchSize() - deferHeader }

// Collection builds the sampling program (and, unwinding by tables, the
// unwinder it tail-calls) with the maps they share.
func Collection(cfg Config) (*ebpf.CollectionSpec, error) {
	spec := &ebpf.CollectionSpec{
		Maps: map[string]*ebpf.MapSpec{
			"counts":   {Name: "profile_counts", Type: ebpf.Hash, KeySize: uint32(cfg.KeySize()), ValueSize: 8, MaxEntries: uint32(cfg.MaxStacks())},
			CountsSwap: {Name: "profile_counts1", Type: ebpf.Hash, KeySize: uint32(cfg.KeySize()), ValueSize: 8, MaxEntries: uint32(cfg.MaxStacks())},
			GenMap:     {Name: "profile_gen", Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1},
			"scratch":  {Name: "profile_scratch", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: uint32(cfg.scratchSize()), MaxEntries: 1},
			"lost":     {Name: "profile_lost", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 1},
			"seen":     {Name: "profile_seen", Type: ebpf.Hash, KeySize: 4, ValueSize: 8, MaxEntries: maxSeen},
			// Two rings: the process notices (16 to 24 bytes), and the
			// deferred samples (up to 10 KiB each, see deferred), so that a
			// flood of deferrals a starved profile reads too slowly (a
			// process whose big table is parsed for a minute) never drops
			// another process's exec notice.
			"events": {Name: "profile_events", Type: ebpf.PerfEventArray},
			"stacks": {Name: "profile_stacks", Type: ebpf.PerfEventArray},
		},
		Programs: map[string]*ebpf.ProgramSpec{},
	}
	if len(cfg.Labels) > 0 || cfg.Context {
		spec.Maps["labels"] = &ebpf.MapSpec{Name: "profile_labels", Type: ebpf.Hash, KeySize: 4, ValueSize: uint32(LabelLocSize * cfg.Locations()), MaxEntries: maxSeen}
	}
	if cfg.Context {
		spec.Maps["contexts"] = &ebpf.MapSpec{Name: "profile_contexts", Type: ebpf.Hash, KeySize: ContextSize, ValueSize: 8, MaxEntries: maxContexts}
		spec.Maps["context_ids"] = &ebpf.MapSpec{Name: "profile_ctx_ids", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 1}
	}
	if n := cfg.ShortKeySize(); n > 0 {
		spec.Maps[ShortCounts] = &ebpf.MapSpec{Name: "profile_short", Type: ebpf.Hash, KeySize: uint32(n), ValueSize: 8, MaxEntries: MaxStacks}
		spec.Maps[ShortSwap] = &ebpf.MapSpec{Name: "profile_short1", Type: ebpf.Hash, KeySize: uint32(n), ValueSize: 8, MaxEntries: MaxStacks}
	}
	if cfg.LazyHashes {
		for _, m := range []string{"counts", CountsSwap, ShortCounts, ShortSwap, "seen", "labels", "contexts"} {
			if spec.Maps[m] != nil {
				spec.Maps[m].Flags |= unix.BPF_F_NO_PREALLOC
			}
		}
	}
	entry, err := sampleProg(cfg)
	if err != nil {
		return nil, err
	}
	typ := ebpf.PerfEvent
	if cfg.Event != nil {
		typ = cfg.Event.Type
	}
	if cfg.OffCPU != nil {
		// At sched:sched_switch; the unwinder it tail-calls is of its type.
		typ = ebpf.TracePoint
		spec.Maps["blocked"] = &ebpf.MapSpec{Name: "profile_blocked", Type: ebpf.Hash, KeySize: 4, ValueSize: uint32(8 + cfg.KeySize()), MaxEntries: maxBlocked}
		if cfg.LazyHashes {
			spec.Maps["blocked"].Flags |= unix.BPF_F_NO_PREALLOC
		}
	}
	if cfg.Event != nil && cfg.Event.Emit {
		// Printed, not counted.
		spec.Maps[RecordsMap] = &ebpf.MapSpec{Name: "profile_records", Type: ebpf.PerfEventArray}
		delete(spec.Maps, "counts")
		delete(spec.Maps, CountsSwap)
		delete(spec.Maps, GenMap)
	}
	spec.Programs["sample"] = &ebpf.ProgramSpec{Name: "profile_sample", Type: typ, License: "GPL", Instructions: entry}
	if cfg.Mode != UnwindFP {
		// The row table, as unwind.Blocks lays it out: blocks of rows, in
		// chunks user space makes as files are loaded (RowChunk), and the
		// first address of each block in one value (read in place).
		chunks := (cfg.Rows/unwind.BlockRows + cfg.ChunkBlocks() - 1) / cfg.ChunkBlocks()
		spec.Maps["rows"] = &ebpf.MapSpec{Name: "profile_chunks", Type: ebpf.ArrayOfMaps, KeySize: 4, ValueSize: 4, MaxEntries: uint32(chunks), InnerMap: cfg.RowChunk()}
		// Both are written through syscalls, not mapped into memory: a
		// mapping of the table is resident in full, 8 MiB more RSS.
		spec.Maps["fences"] = &ebpf.MapSpec{Name: "profile_fences", Type: ebpf.Array, KeySize: 4, ValueSize: uint32(4 * cfg.fences()), MaxEntries: 1}
		spec.Maps["mappings"] = &ebpf.MapSpec{Name: "profile_maps", Type: ebpf.LPMTrie, KeySize: 16, ValueSize: MappingSize, MaxEntries: maxMappings, Flags: 1 /* BPF_F_NO_PREALLOC, required */}
		spec.Maps["progs"] = &ebpf.MapSpec{Name: "profile_progs", Type: ebpf.ProgramArray, KeySize: 4, ValueSize: 4, MaxEntries: 1}
		spec.Programs["unwind"] = &ebpf.ProgramSpec{Name: "profile_unwind", Type: typ, License: "GPL", Instructions: unwindProg(cfg)}
	}
	events := ebpf.TracePoint
	if cfg.RawEvents {
		events = ebpf.RawTracepoint
	}
	spec.Programs["exec"] = &ebpf.ProgramSpec{Name: "profile_exec", Type: events, License: "GPL", Instructions: execProg(cfg)}
	if cfg.Exit != nil {
		spec.Programs["exit"] = &ebpf.ProgramSpec{Name: "profile_exit", Type: ebpf.TracePoint, License: "GPL", Instructions: exitProg(cfg)}
	}
	if cfg.Tree != nil {
		if err := proctree.Add(spec, cfg.Tree); err != nil {
			return nil, err
		}
	}
	return spec, nil
}

// sampleProg runs on every sample: filter, key (pid, kernel stack), then the
// user stack by frame pointers (bpf_get_stack) or by tail call into the
// unwinder.
func sampleProg(cfg Config) (bpf.Instructions, error) {
	var insns asm.Seq
	if cfg.Event != nil {
		insns.Append(cfg.Event.Gate)
	} else {
		insns.Append(asm.Prologue())
	}
	insns.Add(bpf.StoreMem(bpf.RFP, fpCtx, asm.RegCtx, bpf.DWord))
	if cfg.OffCPU != nil {
		in, err := switchIn(cfg)
		if err != nil {
			return nil, err
		}
		insns.Append(in)
	}
	insns.Append(asm.CurrentPid())
	if !cfg.Idle || cfg.OffCPU != nil {
		insns.Append(asm.Note(bpf.Instructions{bpf.JEq.Imm(asm.RegPid, 0, "exit")}, "not the idle task"))
	}
	if cfg.OffCPU != nil {
		live, err := alive(cfg)
		if err != nil {
			return nil, err
		}
		insns.Append(live)
	}
	if cfg.Tree != nil {
		insns.Add(asm.StoreKey(fpTgid, asm.RegPid, bpf.Word))
		insns.Append(asm.PidInSet(proctree.PidsMap, fpTgid, "exit"))
	}
	if cfg.NS != nil {
		insns.Append(asm.CurrentNsPid(*cfg.NS, fpRead))
		insns.Append(asm.Note(bpf.Instructions{bpf.JEq.Imm(asm.RegPid, 0, "exit")}, "a task outside this pid namespace: its memory maps cannot be read here"))
	}
	if cfg.Pid > 0 {
		insns.Append(asm.PidFilter(uint32(cfg.Pid), "exit"))
	}
	insns.Add(asm.StoreKey(fpTgid, asm.RegPid, bpf.Word))
	if cfg.OffCPU != nil {
		insns.Append(asm.Ktime(bpf.R1))
		insns.Add(bpf.StoreMem(bpf.RFP, fpTime, bpf.R1, bpf.DWord).WithSource(bpf.Comment("the time the thread is switched out")))
	}
	insns.Add(bpf.StoreImm(bpf.RFP, fpZero, 0, bpf.Word))
	insns.Append(asm.Note(asm.MapLookup("scratch", fpZero), "r8 = the key being built (per-CPU scratch)"))
	insns.Add(bpf.JEq.Imm(bpf.R0, 0, "exit"))
	insns.Add(bpf.Mov.Reg(bpf.R8, bpf.R0))
	if cfg.Event != nil && cfg.Event.Record > 0 {
		insns.Append(copyRecord(cfg))
	}
	// A failed read zeroes its buffer: one helper call clears the
	// previous sample's frames (bpf_probe_read* since 4.x).
	insns.Add(bpf.Mov.Reg(bpf.R1, bpf.R8).WithSource(bpf.Comment("zero the key: a read of address 0 fails and clears its buffer")))
	insns.Add(bpf.Add.Imm(bpf.R1, keyBase))
	insns.Add(bpf.Mov.Imm(bpf.R2, int32(cfg.KeySize())))
	insns.Add(bpf.Mov.Imm(bpf.R3, 0))
	insns.Add(cfg.Readers.Kernel.Call())
	insns.Add(bpf.StoreMem(bpf.R8, keyPid, asm.RegPid, bpf.Word))
	if cfg.KernelDepth > 0 {
		insns.Add(bpf.Mov.Reg(bpf.R1, asm.RegCtx).WithSource(bpf.Comment("kernel stack: bpf_get_stack(ctx, key.kernel, size, 0), zero-filled")))
		insns.Add(bpf.Mov.Reg(bpf.R2, bpf.R8))
		insns.Add(bpf.Add.Imm(bpf.R2, int32(keyBase+cfg.KernelOffset())))
		insns.Add(bpf.Mov.Imm(bpf.R3, int32(8*cfg.KernelDepth)))
		insns.Add(bpf.Mov.Imm(bpf.R4, 0))
		insns.Add(bpf.FnGetStack.Call())
		insns.Add(bpf.JSGE.Imm(bpf.R0, 0, "kernel_ok"))
		insns.Add(bpf.Mov.Imm(bpf.R1, 1))
		insns.Add(bpf.StoreMem(bpf.R8, keyKernErr, bpf.R1, bpf.Byte))
		insns.Add(asm.Nop().WithSymbol("kernel_ok"))
	}
	// A process seen for the first time is announced to user space, which
	// records its mappings (and loads their unwind tables).
	insns.Append(asm.Note(asm.MapLookup("seen", fpTgid), "first sample of this process: tell user space"))
	insns.Add(bpf.JNE.Imm(bpf.R0, 0, "known"))
	insns.Add(bpf.Mov.Imm(bpf.R1, 0))
	insns.Add(bpf.StoreMem(bpf.RFP, fpNow, bpf.R1, bpf.DWord))
	insns.Append(asm.MapUpdate("seen", fpTgid, fpNow, asm.UpdateNoExist))
	insns.Add(bpf.JNE.Imm(bpf.R0, 0, "known"))
	insns.Append(notify(EventNew))
	insns.Add(asm.Nop().WithSymbol("known"))
	insns.Append(labels(cfg))

	if cfg.Mode == UnwindFP {
		insns.Add(bpf.Mov.Reg(bpf.R1, asm.RegCtx).WithSource(bpf.Comment("user stack by frame pointers: bpf_get_stack(ctx, key.user, size, BPF_F_USER_STACK)")))
		insns.Add(bpf.Mov.Reg(bpf.R2, bpf.R8))
		insns.Add(bpf.Add.Imm(bpf.R2, int32(cfg.keyUser())))
		insns.Add(bpf.Mov.Imm(bpf.R3, int32(8*cfg.UserDepth)))
		insns.Add(bpf.Mov.Imm(bpf.R4, 1<<8))
		insns.Add(bpf.FnGetStack.Call())
		insns.Add(bpf.Mov.Imm(bpf.R1, StopFP))
		insns.Add(bpf.JSGE.Imm(bpf.R0, 0, "fp_ok"))
		insns.Add(bpf.Mov.Imm(bpf.R1, StopRead))
		insns.Add(bpf.StoreMem(bpf.R8, keyStop, bpf.R1, bpf.Byte).WithSymbol("fp_ok"))
		insns.Add(bpf.Ja.Label("count"))
		insns.Append(finish(cfg, "count", bpf.R8, true))
		insns.Append(asm.Return("exit", 0))
		return insns.Instructions, nil
	}

	// The user registers: the sample's own if it interrupted user mode,
	// else the task's saved ones (bpf_task_pt_regs, 5.15+). A thread
	// switched out is always in the kernel.
	// An event's context is the probe's registers or no registers at all
	// (a tracepoint's record).
	ctxRegs := cfg.OffCPU == nil && (cfg.Event == nil || cfg.Event.Regs)
	if cfg.Event != nil && !ctxRegs && !cfg.TaskRegs && (cfg.Arch != X86_64 || cfg.TaskStack == 0) {
		return nil, ErrNoUserRegs
	}
	if ctxRegs && cfg.Arch == ARM64 {
		insns.Add(bpf.LoadMem(bpf.R1, asm.RegCtx, armPstate, bpf.DWord).WithSource(bpf.Comment("user mode (pstate: EL0, AArch64): the sample's registers are the user's")))
		insns.Add(bpf.And.Imm(bpf.R1, armModeMask))
		insns.Add(bpf.JNE.Imm(bpf.R1, 0, "kernel_mode"))
		insns.Append(loadRegsARM64(asm.RegCtx, 0))
		insns.Add(bpf.Ja.Label("have_regs"))
	} else if ctxRegs && cfg.Arch == RISCV64 {
		insns.Add(bpf.LoadMem(bpf.R1, asm.RegCtx, rvPC, bpf.DWord).WithSource(bpf.Comment("user mode (pc in the lower half: the context has no status): the sample's registers are the user's")))
		insns.Add(bpf.RSh.Imm(bpf.R1, 63))
		insns.Add(bpf.JNE.Imm(bpf.R1, 0, "kernel_mode"))
		insns.Append(loadRegsRISCV64(asm.RegCtx))
		insns.Add(bpf.Ja.Label("have_regs"))
	} else if ctxRegs {
		insns.Add(bpf.LoadMem(bpf.R1, asm.RegCtx, regs.CS, bpf.DWord).WithSource(bpf.Comment("user mode (cs & 3 == 3): the sample's registers are the user's")))
		insns.Add(bpf.And.Imm(bpf.R1, 3))
		insns.Add(bpf.JNE.Imm(bpf.R1, 3, "kernel_mode"))
		insns.Append(loadRegs(asm.RegCtx))
		insns.Add(bpf.Ja.Label("have_regs"))
	}
	if cfg.TaskRegs && cfg.Arch == ARM64 {
		insns.Add(bpf.FnGetCurrentTaskBtf.Call().WithSymbol("kernel_mode").WithSource(bpf.Comment("kernel mode: copy x29 to pstate of bpf_task_pt_regs(current)")))
		insns.Add(bpf.Mov.Reg(bpf.R1, bpf.R0))
		insns.Add(bpf.FnTaskPtRegs.Call())
		insns.Add(bpf.Mov.Reg(bpf.R3, bpf.R0))
		insns.Add(bpf.Add.Imm(bpf.R3, armFP))
		insns.Append(copyRegs(cfg))
		insns.Add(bpf.Mov.Reg(bpf.R7, bpf.R8))
		insns.Add(bpf.Add.Imm(bpf.R7, stateRegs))
		insns.Add(bpf.LoadMem(bpf.R1, bpf.R7, armPstate-armFP, bpf.DWord).WithSource(bpf.Comment("a 32-bit task's registers are not unwound")))
		insns.Add(bpf.And.Imm(bpf.R1, armModeMask))
		insns.Add(bpf.JNE.Imm(bpf.R1, 0, "no_regs"))
		insns.Append(loadRegsARM64(bpf.R7, armFP))
	} else if cfg.TaskRegs {
		what, load := "kernel mode: copy bpf_task_pt_regs(current)", loadRegs(bpf.R7)
		if cfg.Arch == RISCV64 {
			what, load = "kernel mode: copy pc to s0 of bpf_task_pt_regs(current)", loadRegsRISCV64(bpf.R7)
		}
		insns.Add(bpf.FnGetCurrentTaskBtf.Call().WithSymbol("kernel_mode").WithSource(bpf.Comment(what)))
		insns.Add(bpf.Mov.Reg(bpf.R1, bpf.R0))
		insns.Add(bpf.FnTaskPtRegs.Call())
		insns.Add(bpf.Mov.Reg(bpf.R3, bpf.R0))
		insns.Append(copyRegs(cfg))
		insns.Add(bpf.Mov.Reg(bpf.R7, bpf.R8))
		insns.Add(bpf.Add.Imm(bpf.R7, stateRegs))
		insns.Append(load)
	} else if cfg.Arch != X86_64 {
		// Before 5.15 arm64's pt_regs has no fixed size to find it by.
		insns.Add(bpf.Ja.Label("no_regs").WithSymbol("kernel_mode").WithSource(bpf.Comment("kernel mode: no way to the user registers before 5.15 here")))
	} else if cfg.TaskStack > 0 {
		// Before 5.15: the user registers are the last thing on the task's
		// kernel stack (task_pt_regs: stack + THREAD_SIZE - sizeof(pt_regs),
		// less 16 bytes of padding on FRED kernels). The user code segment
		// checks each guess.
		read := currentU64(cfg, cfg.TaskStack, fpRead, "kernel mode, before 5.15: the pt_regs at the top of current->stack")
		read[0] = read[0].WithSymbol("kernel_mode")
		insns.Append(read)
		insns.Add(bpf.JNE.Imm(bpf.R0, 0, "no_regs"))
		insns.Add(bpf.LoadMem(bpf.R3, bpf.RFP, fpRead, bpf.DWord))
		insns.Add(bpf.JEq.Imm(bpf.R3, 0, "no_regs"))
		insns.Add(bpf.Add.Imm(bpf.R3, threadSize-ptRegsLen))
		insns.Add(bpf.StoreMem(bpf.RFP, fpRead, bpf.R3, bpf.DWord))
		insns.Append(copyRegs(cfg))
		insns.Add(bpf.Mov.Reg(bpf.R7, bpf.R8))
		insns.Add(bpf.Add.Imm(bpf.R7, stateRegs))
		insns.Add(bpf.LoadMem(bpf.R1, bpf.R7, regs.CS, bpf.DWord))
		insns.Add(bpf.JEq.Imm(bpf.R1, userCS, "task_regs"))
		// FRED kernels (6.9+) keep 16 bytes above the registers
		// (TOP_OF_KERNEL_STACK_PADDING): the tests force this path there.
		insns.Add(bpf.LoadMem(bpf.R3, bpf.RFP, fpRead, bpf.DWord).WithSource(bpf.Comment("not user registers: try 16 bytes lower (FRED's padding)")))
		insns.Add(bpf.Sub.Imm(bpf.R3, 16))
		insns.Append(copyRegs(cfg))
		insns.Add(bpf.LoadMem(bpf.R1, bpf.R7, regs.CS, bpf.DWord))
		insns.Add(bpf.JNE.Imm(bpf.R1, userCS, "no_regs"))
		insns.Add(asm.Nop().WithSymbol("task_regs"))
		insns.Append(loadRegs(bpf.R7))
	} else {
		insns.Add(bpf.Ja.Label("no_regs").WithSymbol("kernel_mode").WithSource(bpf.Comment("kernel mode: no way to the user registers")))
	}
	insns.Add(bpf.JEq.Imm(bpf.R1, 0, "no_regs").WithSymbol("have_regs"))
	insns.Add(bpf.StoreMem(bpf.R8, statePC, bpf.R1, bpf.DWord))
	insns.Add(bpf.StoreMem(bpf.R8, stateSP, bpf.R2, bpf.DWord))
	insns.Add(bpf.StoreMem(bpf.R8, stateBP, bpf.R3, bpf.DWord))
	insns.Add(bpf.Mov.Imm(bpf.R1, 0))
	insns.Add(bpf.StoreMem(bpf.R8, stateN, bpf.R1, bpf.DWord))
	insns.Add(bpf.StoreMem(bpf.R8, stateRA, bpf.R1, bpf.Word))
	if cfg.Mode != UnwindFP {
		insns.Add(bpf.StoreMem(bpf.R8, stateMapLen, bpf.R1, bpf.DWord).WithSource(bpf.Comment("no mapping cached yet")))
	}
	if cfg.OffCPU != nil {
		insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpTime, bpf.DWord).WithSource(bpf.Comment("the time switched out, for the unwinder's stash")))
		insns.Add(bpf.StoreMem(bpf.R8, stashTime, bpf.R1, bpf.DWord))
		sleep, err := asleep(cfg)
		if err != nil {
			return nil, err
		}
		insns.Append(sleep)
	}
	insns.Add(bpf.Mov.Reg(bpf.R1, asm.RegCtx).WithSource(bpf.Comment("walk the user stack: tail call the unwinder")))
	insns.Add(bpf.LoadMapPtr(bpf.R2, 0).WithReference("progs"))
	insns.Add(bpf.Mov.Imm(bpf.R3, 0))
	insns.Add(bpf.FnTailCall.Call())
	insns.Add(bpf.Mov.Imm(bpf.R1, StopTruncated))
	insns.Add(bpf.Ja.Label("stop"))
	insns.Add(bpf.Mov.Imm(bpf.R1, StopNoRegs).WithSymbol("no_regs"))
	insns.Add(bpf.StoreMem(bpf.R8, keyStop, bpf.R1, bpf.Byte).WithSymbol("stop"))
	insns.Append(finish(cfg, "count", bpf.R8, true))
	insns.Append(asm.Return("exit", 0))
	return insns.Instructions, nil
}

// copyRecord copies the record the gate left on the stack (Event.RecordAt)
// into the scratch value (R8), after the key: 8 bytes at a time, then 4,
// 2 and 1 (the verifier refuses a read of stack bytes never written).
func copyRecord(cfg Config) bpf.Instructions {
	ev := cfg.Event
	var insns asm.Seq
	dst := int16(keyBase + cfg.RecordOffset())
	for off := 0; off < ev.Record; {
		n := 8
		for ev.Record-off < n {
			n /= 2
		}
		size, _ := asm.MemSize(n)
		load := bpf.LoadMem(bpf.R1, bpf.RFP, ev.RecordAt+int16(off), size)
		if off == 0 {
			load = load.WithSource(bpf.Comment(fmt.Sprintf("the event's record, %d bytes at fp%d, after the key", ev.Record, ev.RecordAt)))
		}
		insns.Add(load)
		insns.Add(bpf.StoreMem(bpf.R8, dst+int16(off), bpf.R1, size))
		off += n
	}
	return insns.Instructions
}

// copyRegs copies the pt_regs at the kernel address in R3 into the
// scratch value's state (R8); a failed read goes to no_regs.
func copyRegs(cfg Config) bpf.Instructions {
	var insns asm.Seq
	insns.Add(bpf.Mov.Reg(bpf.R1, bpf.R8))
	insns.Add(bpf.Add.Imm(bpf.R1, stateRegs))
	size := int32(ptRegsLen)
	switch cfg.Arch {
	case ARM64:
		size = armRegsLen
	case RISCV64:
		size = rvRegsLen
	}
	insns.Add(bpf.Mov.Imm(bpf.R2, size))
	insns.Add(cfg.Readers.Kernel.Call())
	insns.Add(bpf.JNE.Imm(bpf.R0, 0, "no_regs"))
	return insns.Instructions
}

// loadRegs loads ip, sp and bp of the pt_regs at from into R1, R2, R3 (the
// context and a copy take separate loads: the verifier rewrites context
// accesses and refuses an instruction that reads both).
func loadRegs(from bpf.Register) bpf.Instructions {
	return bpf.Instructions{
		bpf.LoadMem(bpf.R1, from, regs.IP, bpf.DWord),
		bpf.LoadMem(bpf.R2, from, regs.SP, bpf.DWord),
		bpf.LoadMem(bpf.R3, from, regs.FP, bpf.DWord),
	}
}

// arm64's user registers (struct user_pt_regs, the start of pt_regs and
// of a perf_event program's context): x29 at 232, x30, sp, pc, then
// pstate, whose mode bits are 0 in EL0 (user mode, AArch64: a 32-bit
// task's have PSR_MODE32_BIT). A kernel-mode sample copies these five.
const (
	armFP       = 29 * 8
	armLR       = 30 * 8
	armSP       = 31 * 8
	armPC       = 32 * 8
	armPstate   = 33 * 8
	armModeMask = 0x1f
	armRegsLen  = armPstate + 8 - armFP
)

// loadRegsARM64 loads pc, sp and x29 of the registers at from (less base:
// the copy starts at x29) into R1, R2, R3, and x30 into the walk's state.
func loadRegsARM64(from bpf.Register, base int16) bpf.Instructions {
	return bpf.Instructions{
		bpf.LoadMem(bpf.R1, from, armPC-base, bpf.DWord),
		bpf.LoadMem(bpf.R2, from, armSP-base, bpf.DWord),
		bpf.LoadMem(bpf.R3, from, armFP-base, bpf.DWord),
		bpf.LoadMem(bpf.R4, from, armLR-base, bpf.DWord),
		bpf.StoreMem(bpf.R8, stateLR, bpf.R4, bpf.DWord),
	}
}

// riscv64's user registers (struct user_regs_struct: the start of pt_regs
// and all of a perf_event program's context): pc, ra, sp, gp, tp, t0 to t2,
// then s0 at 64. The context ends before status: a user-mode sample is
// told by its pc, in the lower half. A kernel-mode sample copies pc to s0.
const (
	rvPC      = 0
	rvRA      = 8
	rvSP      = 16
	rvFP      = 64
	rvRegsLen = rvFP + 8
)

// loadRegsRISCV64 loads pc, sp and s0 of the registers at from into R1,
// R2, R3, and ra into the walk's state.
func loadRegsRISCV64(from bpf.Register) bpf.Instructions {
	return bpf.Instructions{
		bpf.LoadMem(bpf.R1, from, rvPC, bpf.DWord),
		bpf.LoadMem(bpf.R2, from, rvSP, bpf.DWord),
		bpf.LoadMem(bpf.R3, from, rvFP, bpf.DWord),
		bpf.LoadMem(bpf.R4, from, rvRA, bpf.DWord),
		bpf.StoreMem(bpf.R8, stateLR, bpf.R4, bpf.DWord),
	}
}

// notify sends {tgid, kind, 0} to user space (the context at fpCtx, the
// tgid at fpTgid). Clobbers R0-R5.
func notify(kind int32) bpf.Instructions {
	var insns asm.Seq
	insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpTgid, bpf.Word).WithSource(bpf.Comment(fmt.Sprintf("bpf_perf_event_output(ctx, events, BPF_F_CURRENT_CPU, {tgid, %d, 0}, 16)", kind))))
	insns.Add(bpf.StoreMem(bpf.RFP, fpEvent, bpf.R1, bpf.Word))
	insns.Add(bpf.StoreImm(bpf.RFP, fpEvent+4, int64(kind), bpf.Word))
	insns.Add(bpf.Mov.Imm(bpf.R1, 0))
	insns.Add(bpf.StoreMem(bpf.RFP, fpEvent+8, bpf.R1, bpf.DWord))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpCtx, bpf.DWord))
	insns.Append(output("events", bpf.RFP, fpEvent, 16))
	return insns.Instructions
}

// output sends size bytes at from+off to user space through the perf
// event array ring, the context in R1:
// bpf_perf_event_output(ctx, ring, BPF_F_CURRENT_CPU, from+off, size).
func output(ring string, from bpf.Register, off, size int32) bpf.Instructions {
	return outputR5(ring, from, off, bpf.Mov.Imm(bpf.R5, size))
}

// outputSized is output of size+reg bytes: a record as long as what it
// holds (reg bounded by the verifier's knowledge of it).
func outputSized(ring string, from bpf.Register, off int32, reg bpf.Register, size int32) bpf.Instructions {
	return outputR5(ring, from, off, bpf.Mov.Reg(bpf.R5, reg), bpf.Add.Imm(bpf.R5, size))
}

// outputR5 is the output call, its size set in R5 by setSize.
func outputR5(ring string, from bpf.Register, off int32, setSize ...bpf.Instruction) bpf.Instructions {
	insns := bpf.Instructions{
		bpf.LoadMapPtr(bpf.R2, 0).WithReference(ring),
		bpf.LoadImm(bpf.R3, 0xffffffff, bpf.DWord),
		bpf.Mov.Reg(bpf.R4, from),
		bpf.Add.Imm(bpf.R4, off),
	}
	insns = append(insns, setSize...)
	return append(insns, bpf.FnPerfEventOutput.Call())
}

// count adds one to counts[key], the key at keyBase of the scratch value in
// scratch (a callee-saved register); a full map counts in lost.
func count(cfg Config, label string, scratch bpf.Register) bpf.Instructions {
	return add(cfg, label, scratch, keyBase, bpf.Mov.Imm(bpf.R1, 1), "counts[key]++")
}

// add adds R1, as amount sets it (from a constant or a callee-saved
// register), to counts[key], the key at keyOff of key, in the hash of the
// two that gen[0] names (user space drains the other: see CountsSwap); a
// full map counts in lost. A key of ShortUserFrames user frames or fewer
// counts in the short hashes (ShortCounts), its first ShortKeySize bytes
// the key: most stacks are that short, and a hash's cost is its key's
// size (each lookup hashes and compares the whole key). what says it in
// the comment.
func add(cfg Config, label string, key bpf.Register, keyOff int32, amount bpf.Instruction, what string) bpf.Instructions {
	var insns asm.Seq
	insns.Add(bpf.LoadMapValue(bpf.R1, 0, 0).WithReference(GenMap).WithSymbol(label).WithSource(bpf.Comment(what + ": in counts or " + CountsSwap + ", as " + GenMap + "[0] says")))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.R1, 0, bpf.Word))
	if cfg.ShortKeySize() > 0 {
		insns.Add(bpf.LoadMem(bpf.R2, key, int16(keyOff)+int16(cfg.ShortKeySize()), bpf.DWord).WithSource(bpf.Comment(fmt.Sprintf("no user frame past the first %d: in %s or %s", ShortUserFrames, ShortCounts, ShortSwap))))
		insns.Add(bpf.JNE.Imm(bpf.R2, 0, label+"_deep"))
		insns.Add(bpf.JNE.Imm(bpf.R1, 0, label+"_short1"))
		insns.Append(addTo(label+"_short0", ShortCounts, key, keyOff, amount))
		insns.Add(bpf.Ja.Label(label + "_done"))
		insns.Append(addTo(label+"_short1", ShortSwap, key, keyOff, amount))
		insns.Add(bpf.Ja.Label(label + "_done"))
		insns.Add(bpf.JNE.Imm(bpf.R1, 0, label+"_1").WithSymbol(label + "_deep"))
	} else {
		insns.Add(bpf.JNE.Imm(bpf.R1, 0, label+"_1"))
	}
	insns.Append(addTo(label+"_0", "counts", key, keyOff, amount))
	insns.Add(bpf.Ja.Label(label + "_done"))
	insns.Append(addTo(label+"_1", CountsSwap, key, keyOff, amount))
	insns.Add(asm.Nop().WithSymbol(label + "_done"))
	return insns.Instructions
}

// addTo is add's count in one hash, m: insert if new, a full map counts in
// lost.
func addTo(p, m string, key bpf.Register, keyOff int32, amount bpf.Instruction) bpf.Instructions {
	var insns asm.Seq
	insns.Add(bpf.LoadMapPtr(bpf.R1, 0).WithReference(m).WithSymbol(p).WithSource(bpf.Comment(m + "[key] (insert if new, a full map counts in lost)")))
	insns.Add(bpf.Mov.Reg(bpf.R2, key))
	insns.Add(bpf.Add.Imm(bpf.R2, keyOff))
	insns.Add(bpf.FnMapLookupElem.Call())
	insns.Add(bpf.JEq.Imm(bpf.R0, 0, p+"_insert"))
	insns.Add(amount.WithSymbol(p + "_add"))
	insns.Add(bpf.StoreXAdd(bpf.R0, bpf.R1, bpf.DWord))
	insns.Add(bpf.Ja.Label(p + "_done"))
	insns.Add(amount.WithSymbol(p + "_insert"))
	insns.Add(bpf.StoreMem(bpf.RFP, fpOne, bpf.R1, bpf.DWord))
	insns.Add(bpf.LoadMapPtr(bpf.R1, 0).WithReference(m))
	insns.Add(bpf.Mov.Reg(bpf.R2, key))
	insns.Add(bpf.Add.Imm(bpf.R2, keyOff))
	insns.Add(bpf.Mov.Reg(bpf.R3, bpf.RFP))
	insns.Add(bpf.Add.Imm(bpf.R3, fpOne))
	insns.Add(bpf.Mov.Imm(bpf.R4, asm.UpdateNoExist))
	insns.Add(bpf.FnMapUpdateElem.Call())
	insns.Add(bpf.JEq.Imm(bpf.R0, 0, p+"_done"))
	insns.Add(bpf.LoadMapPtr(bpf.R1, 0).WithReference(m).WithSource(bpf.Comment("another CPU inserted it first, or the map is full")))
	insns.Add(bpf.Mov.Reg(bpf.R2, key))
	insns.Add(bpf.Add.Imm(bpf.R2, keyOff))
	insns.Add(bpf.FnMapLookupElem.Call())
	insns.Add(bpf.JNE.Imm(bpf.R0, 0, p+"_add"))
	insns.Add(bpf.StoreImm(bpf.RFP, fpZero, 0, bpf.Word))
	insns.Append(asm.PerCPUArrayIncrement(p+"_lost", "lost", fpZero))
	insns.Add(asm.Nop().WithSymbol(p + "_done"))
	return insns.Instructions
}

// unwindProg walks framesPerProg frames of the user stack by the row
// tables, then tail-calls itself; the walk's state lives in the scratch
// value. Registers in a frame: R6 the address in the file, R7 and R8 the
// row search, R9 the scratch value.
func unwindProg(cfg Config) bpf.Instructions {
	var insns asm.Seq
	insns.Add(bpf.StoreMem(bpf.RFP, fpCtx, bpf.R1, bpf.DWord).WithSource(bpf.Comment("r9 = the per-CPU scratch: key and walk state")))
	insns.Add(bpf.StoreImm(bpf.RFP, fpZero, 0, bpf.Word))
	insns.Append(asm.MapLookup("scratch", fpZero))
	insns.Add(bpf.JEq.Imm(bpf.R0, 0, "exit"))
	insns.Add(bpf.Mov.Reg(bpf.R9, bpf.R0))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.R9, keyPid, bpf.Word))
	insns.Add(bpf.StoreMem(bpf.RFP, fpTgid, bpf.R1, bpf.Word))
	for f := 0; f < framesPerProg; f++ {
		insns.Append(frame(cfg, fmt.Sprintf("f%d", f), f == framesPerProg-1))
	}
	insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpCtx, bpf.DWord).WithSymbol("next").WithSource(bpf.Comment("more frames: tail call this program again (31 times walk 256 frames; the kernel allows 32, 33 since 5.17)")))
	insns.Add(bpf.LoadMapPtr(bpf.R2, 0).WithReference("progs"))
	insns.Add(bpf.Mov.Imm(bpf.R3, 0))
	insns.Add(bpf.FnTailCall.Call())
	insns.Add(bpf.Mov.Imm(bpf.R1, StopTruncated))
	insns.Add(bpf.Ja.Label("stop"))
	insns.Add(bpf.Mov.Imm(bpf.R1, StopNoRow).WithSymbol("no_row"))
	insns.Add(bpf.Ja.Label("signal"))
	insns.Add(bpf.Mov.Imm(bpf.R1, StopNoTable).WithSymbol("no_table"))
	insns.Add(bpf.Ja.Label("signal"))
	insns.Add(bpf.Mov.Imm(bpf.R1, StopRead).WithSymbol("read_error"))
	insns.Add(bpf.Ja.Label("stop"))
	insns.Add(bpf.Mov.Imm(bpf.R1, StopTruncated).WithSymbol("truncated"))
	insns.Add(bpf.Ja.Label("stop"))
	insns.Add(bpf.Mov.Imm(bpf.R1, StopEnd).WithSymbol("end"))
	insns.Add(bpf.Ja.Label("stop"))
	insns.Append(signalFrame(cfg))
	insns.Append(deferred(cfg))
	insns.Add(bpf.StoreMem(bpf.R9, keyStop, bpf.R1, bpf.Byte).WithSymbol("stop"))
	insns.Append(finish(cfg, "count", bpf.R9, false))
	insns.Append(asm.Return("exit", 0))
	return insns.Instructions
}

// frame steps one frame: record the pc, find its file and row, compute the
// CFA, read the return address and the saved rbp. last frames of a program
// fall through to the tail call.
func frame(cfg Config, p string, last bool) bpf.Instructions {
	next := "next"
	if !last {
		next = p + "_end"
	}
	var insns asm.Seq
	insns.Add(bpf.LoadMem(bpf.R1, bpf.R9, stateN, bpf.DWord).WithSymbol(p).WithSource(bpf.Comment("frame: key.user[n++] = pc; stop at the depth limit or pc 0")))
	insns.Add(bpf.JGE.Imm(bpf.R1, int32(cfg.UserDepth), "truncated"))
	insns.Add(bpf.LoadMem(bpf.R2, bpf.R9, statePC, bpf.DWord))
	insns.Add(bpf.JEq.Imm(bpf.R2, 0, "end"))
	insns.Add(bpf.Mov.Reg(bpf.R3, bpf.R1))
	insns.Add(bpf.LSh.Imm(bpf.R3, 3))
	insns.Add(bpf.Add.Reg(bpf.R3, bpf.R9))
	insns.Add(bpf.StoreMem(bpf.R3, int16(cfg.keyUser()), bpf.R2, bpf.DWord))
	insns.Add(bpf.Mov.Reg(bpf.R3, bpf.R1))
	insns.Add(bpf.Add.Imm(bpf.R3, 1))
	insns.Add(bpf.StoreMem(bpf.R9, stateN, bpf.R3, bpf.DWord))
	insns.Add(bpf.LoadMem(bpf.R3, bpf.R9, stateRA, bpf.Word).WithSource(bpf.Comment("a return address points past its call: look up pc-1 (callers' pcs are)")))
	insns.Add(bpf.Sub.Reg(bpf.R2, bpf.R3))
	insns.Add(bpf.StoreImm(bpf.R9, stateRA, 1, bpf.Word))
	insns.Add(bpf.StoreMem(bpf.RFP, fpLookup, bpf.R2, bpf.DWord))
	insns.Add(bpf.Mov.Reg(bpf.R1, bpf.R2).WithSource(bpf.Comment("in the mapping cached (address - start < length): no trie lookup")))
	insns.Add(bpf.LoadMem(bpf.R3, bpf.R9, stateMapStart, bpf.DWord))
	insns.Add(bpf.Sub.Reg(bpf.R1, bpf.R3))
	insns.Add(bpf.LoadMem(bpf.R3, bpf.R9, stateMapLen, bpf.DWord))
	insns.Add(bpf.JGT.Reg(bpf.R3, bpf.R1, p+"_mapped"))
	insns.Add(bpf.StoreImm(bpf.RFP, fpLPM, 96, bpf.Word).WithSource(bpf.Comment("mappings: longest prefix of {pid, address}, big-endian")))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.R9, keyPid, bpf.Word))
	insns.Add(bpf.HostTo(bpf.BE, bpf.R1, bpf.Word))
	insns.Add(bpf.StoreMem(bpf.RFP, fpLPM+4, bpf.R1, bpf.Word))
	insns.Add(bpf.HostTo(bpf.BE, bpf.R2, bpf.DWord))
	insns.Add(bpf.StoreMem(bpf.RFP, fpLPM+8, bpf.R2, bpf.DWord))
	insns.Append(asm.MapLookup("mappings", fpLPM))
	insns.Add(bpf.JEq.Imm(bpf.R0, 0, "deferred"))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.R0, 0, bpf.DWord).WithSource(bpf.Comment("cache it: first and rows, bias, start, length")))
	insns.Add(bpf.StoreMem(bpf.R9, stateMapFirst, bpf.R1, bpf.DWord))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.R0, 8, bpf.DWord))
	insns.Add(bpf.StoreMem(bpf.R9, stateMapBias, bpf.R1, bpf.DWord))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.R0, 16, bpf.DWord))
	insns.Add(bpf.StoreMem(bpf.R9, stateMapStart, bpf.R1, bpf.DWord))
	insns.Add(bpf.LoadMem(bpf.R2, bpf.R0, 24, bpf.DWord))
	insns.Add(bpf.Sub.Reg(bpf.R2, bpf.R1))
	insns.Add(bpf.StoreMem(bpf.R9, stateMapLen, bpf.R2, bpf.DWord))
	insns.Add(bpf.LoadMem(bpf.R6, bpf.RFP, fpLookup, bpf.DWord).WithSymbol(p + "_mapped").WithSource(bpf.Comment("r6 = the address in the file; r7, r8 = its rows (none: a mapping known to have no table)")))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.R9, stateMapBias, bpf.DWord))
	insns.Add(bpf.Sub.Reg(bpf.R6, bpf.R1))
	insns.Add(bpf.LoadMem(bpf.R7, bpf.R9, stateMapFirst, bpf.Word))
	insns.Add(bpf.LoadMem(bpf.R8, bpf.R9, stateMapCount, bpf.Word))
	insns.Add(bpf.JEq.Imm(bpf.R8, 0, p+"_notable"))
	insns.Append(asm.RowSearch(p+"_search", "rows", "fences", int32(cfg.fences()-1), cfg.chunkShift(), bpf.R6, bpf.R7, bpf.R8, fpSearch, "no_row"))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.R0, 0, bpf.Word).WithSource(bpf.Comment("the row's address: above the target, the target is below the file's first row")))
	insns.Add(bpf.JGT.Reg(bpf.R1, bpf.R6, "no_row"))
	insns.Add(bpf.LoadMem(bpf.R2, bpf.R0, 4, bpf.Word).WithSource(bpf.Comment("the rule: base (bits 0-1), saved rbp (2-9), offset (10-31)")))
	insns.Add(bpf.StoreMem(bpf.RFP, fpRule, bpf.R2, bpf.DWord))
	if cfg.Arch.linkRegister() {
		insns.Append(stepLR(cfg, p, next))
		insns.Append(noTable(cfg, p, next))
		if !last {
			insns.Add(asm.Nop().WithSymbol(next))
		}
		return insns.Instructions
	}
	insns.Add(bpf.Mov.Reg(bpf.R3, bpf.R2))
	insns.Add(bpf.And.Imm(bpf.R3, 3))
	insns.Add(bpf.Mov.Reg(bpf.R4, bpf.R2))
	insns.Add(bpf.RSh.Imm(bpf.R4, 10))
	insns.Add(bpf.JNE.Imm(bpf.R3, unwind.BaseStop, p+"_rsp"))
	insns.Add(bpf.Mov.Reg(bpf.R1, bpf.R4))
	insns.Add(bpf.JEq.Imm(bpf.R1, StopEnd, "stop"))
	insns.Add(bpf.Mov.Reg(bpf.R5, bpf.R4))
	insns.Add(bpf.And.Imm(bpf.R5, unwind.KindMask))
	insns.Add(bpf.JNE.Imm(bpf.R5, unwind.DerefRBP, "signal"))
	insns.Append(derefRBP(cfg, p))
	insns.Add(bpf.LoadMem(bpf.R5, bpf.R9, stateSP, bpf.DWord).WithSymbol(p + "_rsp"))
	insns.Add(bpf.JEq.Imm(bpf.R3, unwind.BaseRSP, p+"_cfa"))
	insns.Add(bpf.JNE.Imm(bpf.R3, unwind.BaseRBP, p+"_plt"))
	insns.Add(bpf.LoadMem(bpf.R5, bpf.R9, stateBP, bpf.DWord))
	insns.Add(bpf.Ja.Label(p + "_cfa"))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.R9, statePC, bpf.DWord).WithSymbol(p + "_plt").WithSource(bpf.Comment("PLT: cfa = rsp + 8 + ((pc & 15) >= cut) * 8")))
	insns.Add(bpf.And.Imm(bpf.R1, 15))
	insns.Add(bpf.Add.Imm(bpf.R5, 8))
	insns.Add(bpf.JGT.Reg(bpf.R4, bpf.R1, p+"_plt_lo")) // no JLT: 4.14+
	insns.Add(bpf.Add.Imm(bpf.R5, 8))
	insns.Add(bpf.Mov.Imm(bpf.R4, 0).WithSymbol(p + "_plt_lo"))
	insns.Add(bpf.Add.Reg(bpf.R5, bpf.R4).WithSymbol(p + "_cfa"))
	insns.Add(bpf.StoreMem(bpf.RFP, fpCFA, bpf.R5, bpf.DWord))
	// rbp saved just below the return address (every frame that keeps
	// frame pointers): both in one read, one helper call a frame less.
	insns.Add(bpf.LoadMem(bpf.R3, bpf.RFP, fpRule, bpf.DWord).WithSource(bpf.Comment("rbp saved at cfa - 16: rbp and the return address in one read")))
	insns.Add(bpf.LSh.Imm(bpf.R3, 54))
	insns.Add(bpf.ArSh.Imm(bpf.R3, 56))
	insns.Add(bpf.JNE.Imm(bpf.R3, -2, p+"_ra"))
	insns.Add(bpf.Mov.Reg(bpf.R3, bpf.R5))
	insns.Add(bpf.Sub.Imm(bpf.R3, 16))
	insns.Append(readPair(cfg))
	insns.Add(bpf.Ja.Label(p + "_step"))
	insns.Add(bpf.Mov.Reg(bpf.R3, bpf.R5).WithSymbol(p + "_ra").WithSource(bpf.Comment("return address = *(cfa - 8)")))
	insns.Add(bpf.Sub.Imm(bpf.R3, 8))
	insns.Add(bpf.Mov.Reg(bpf.R1, bpf.RFP))
	insns.Add(bpf.Add.Imm(bpf.R1, fpRead))
	insns.Add(bpf.Mov.Imm(bpf.R2, 8))
	insns.Add(cfg.Readers.User.Call())
	insns.Add(bpf.JNE.Imm(bpf.R0, 0, "read_error"))
	insns.Add(bpf.LoadMem(bpf.R3, bpf.RFP, fpRule, bpf.DWord).WithSource(bpf.Comment("rbp = *(cfa + 8*n) if the rule saved it")))
	insns.Add(bpf.LSh.Imm(bpf.R3, 54))
	insns.Add(bpf.ArSh.Imm(bpf.R3, 56))
	insns.Add(bpf.JEq.Imm(bpf.R3, 0, p+"_step"))
	insns.Add(bpf.LSh.Imm(bpf.R3, 3))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpCFA, bpf.DWord))
	insns.Add(bpf.Add.Reg(bpf.R3, bpf.R1))
	insns.Add(bpf.Mov.Reg(bpf.R1, bpf.R9))
	insns.Add(bpf.Add.Imm(bpf.R1, stateBP))
	insns.Add(bpf.Mov.Imm(bpf.R2, 8))
	insns.Add(cfg.Readers.User.Call())
	insns.Add(bpf.JNE.Imm(bpf.R0, 0, "read_error"))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpCFA, bpf.DWord).WithSymbol(p + "_step").WithSource(bpf.Comment("the caller: sp = cfa, pc = return address")))
	insns.Add(bpf.StoreMem(bpf.R9, stateSP, bpf.R1, bpf.DWord))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpRead, bpf.DWord))
	insns.Add(bpf.StoreMem(bpf.R9, statePC, bpf.R1, bpf.DWord))
	insns.Add(bpf.Ja.Label(next))
	insns.Append(noTable(cfg, p, next))
	if !last {
		insns.Add(asm.Nop().WithSymbol(next))
	}
	return insns.Instructions
}

// readPair reads the 16 bytes at R3, a saved frame pointer then a return
// address: the first to the state's frame pointer, the second to fpRead,
// where a step takes the return address from.
func readPair(cfg Config) bpf.Instructions {
	return bpf.Instructions{
		bpf.Mov.Reg(bpf.R1, bpf.RFP),
		bpf.Add.Imm(bpf.R1, fpRead),
		bpf.Mov.Imm(bpf.R2, 16),
		cfg.Readers.User.Call(),
		bpf.JNE.Imm(bpf.R0, 0, "read_error"),
		bpf.LoadMem(bpf.R1, bpf.RFP, fpRead, bpf.DWord),
		bpf.StoreMem(bpf.R9, stateBP, bpf.R1, bpf.DWord),
		bpf.LoadMem(bpf.R1, bpf.RFP, fpRead+8, bpf.DWord),
		bpf.StoreMem(bpf.RFP, fpRead, bpf.R1, bpf.DWord),
	}
}

// stepLR steps an arm64 or riscv64 frame by its rule word (R2, also at
// fpRule; see unwind.ARM64): CFA = sp or x29 + offset; the return address
// in x30 (a frame that has not saved it: only where pc is exact, the
// sampled frame or one a signal interrupted), or at CFA - 8n, with x29
// below it if the frame saved the pair. riscv64 (ra for x30, s0 for x29)
// has one more: s0 saved at CFA - 8n and the return address back in ra
// (an epilogue between its two loads). arm64's return address loses its
// pointer authentication code (the bits above the 48 of a user address).
func stepLR(cfg Config, p, next string) bpf.Instructions {
	var insns asm.Seq
	insns.Add(bpf.Mov.Reg(bpf.R3, bpf.R2).WithSource(bpf.Comment("the rule: base (bits 0-1), saves (2-3), slot (4-16), cfa/8 (17-31); a stop's reason in 10-13")))
	insns.Add(bpf.And.Imm(bpf.R3, 3))
	insns.Add(bpf.JNE.Imm(bpf.R3, unwind.BaseStop, p+"_base"))
	insns.Add(bpf.Mov.Reg(bpf.R1, bpf.R2))
	insns.Add(bpf.RSh.Imm(bpf.R1, 10))
	insns.Add(bpf.And.Imm(bpf.R1, unwind.KindMask))
	insns.Add(bpf.JEq.Imm(bpf.R1, StopEnd, "stop"))
	insns.Add(bpf.Ja.Label("signal"))
	insns.Add(bpf.LoadMem(bpf.R5, bpf.R9, stateSP, bpf.DWord).WithSymbol(p + "_base"))
	insns.Add(bpf.JEq.Imm(bpf.R3, unwind.BaseRSP, p+"_cfa"))
	insns.Add(bpf.LoadMem(bpf.R5, bpf.R9, stateBP, bpf.DWord))
	insns.Add(bpf.Mov.Reg(bpf.R4, bpf.R2).WithSymbol(p + "_cfa"))
	insns.Add(bpf.RSh.Imm(bpf.R4, armCFAShift))
	insns.Add(bpf.LSh.Imm(bpf.R4, 3))
	insns.Add(bpf.Add.Reg(bpf.R5, bpf.R4))
	insns.Add(bpf.StoreMem(bpf.RFP, fpCFA, bpf.R5, bpf.DWord))
	insns.Add(bpf.Mov.Reg(bpf.R4, bpf.R2))
	insns.Add(bpf.RSh.Imm(bpf.R4, armSavesShift))
	insns.Add(bpf.And.Imm(bpf.R4, 3))
	insns.Add(bpf.JNE.Imm(bpf.R4, unwind.SavesNone, p+"_saved"))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpLookup, bpf.DWord).WithSource(bpf.Comment("nothing saved: the return address is x30's, known only where pc is exact")))
	insns.Add(bpf.LoadMem(bpf.R3, bpf.R9, statePC, bpf.DWord))
	insns.Add(bpf.JEq.Reg(bpf.R1, bpf.R3, p+"_lr"))
	insns.Add(bpf.Mov.Imm(bpf.R1, StopUnsupported).WithSymbol(p + "_inexact"))
	insns.Add(bpf.Ja.Label("signal"))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.R9, stateLR, bpf.DWord).WithSymbol(p + "_lr"))
	insns.Add(bpf.StoreMem(bpf.RFP, fpRead, bpf.R1, bpf.DWord))
	insns.Add(bpf.Ja.Label(p + "_step"))
	insns.Add(bpf.Mov.Reg(bpf.R3, bpf.R2).WithSymbol(p + "_saved").WithSource(bpf.Comment("the slot: cfa - 8n")))
	insns.Add(bpf.RSh.Imm(bpf.R3, armSlotShift))
	insns.Add(bpf.And.Imm(bpf.R3, armSlotMask))
	insns.Add(bpf.LSh.Imm(bpf.R3, 3))
	insns.Add(bpf.Mov.Reg(bpf.R1, bpf.R5))
	insns.Add(bpf.Sub.Reg(bpf.R1, bpf.R3))
	insns.Add(bpf.Mov.Reg(bpf.R3, bpf.R1))
	insns.Add(bpf.JEq.Imm(bpf.R4, unwind.SavesPair, p+"_pair"))
	if cfg.Arch == RISCV64 {
		insns.Add(bpf.JEq.Imm(bpf.R4, unwind.SavesFP, p+"_s0"))
	}
	insns.Append(read8(bpf.RFP, fpRead, cfg.Readers.User.Call(), "read_error"))
	insns.Add(bpf.Ja.Label(p + "_step"))
	if cfg.Arch == RISCV64 {
		insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpLookup, bpf.DWord).WithSymbol(p + "_s0").WithSource(bpf.Comment("s0 saved, the return address back in ra: known only where pc is exact")))
		insns.Add(bpf.LoadMem(bpf.R2, bpf.R9, statePC, bpf.DWord))
		insns.Add(bpf.JNE.Reg(bpf.R1, bpf.R2, p+"_inexact"))
		insns.Append(read8(bpf.R9, stateBP, cfg.Readers.User.Call(), "read_error"))
		insns.Add(bpf.Ja.Label(p + "_lr"))
	}
	pair := readPair(cfg)
	pair[0] = pair[0].WithSymbol(p + "_pair").WithSource(bpf.Comment("the pair: x29, then x30"))
	insns.Append(pair)
	insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpCFA, bpf.DWord).WithSymbol(p + "_step").WithSource(bpf.Comment("the caller: sp = cfa, pc = return address without its authentication code")))
	insns.Add(bpf.StoreMem(bpf.R9, stateSP, bpf.R1, bpf.DWord))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpRead, bpf.DWord))
	if cfg.Arch == ARM64 {
		insns.Append(stripPAC(bpf.R1, bpf.R2))
	}
	insns.Add(bpf.StoreMem(bpf.R9, statePC, bpf.R1, bpf.DWord))
	insns.Add(bpf.Ja.Label(next))
	return insns.Instructions
}

// arm64's rule word's fields (see unwind.ARM64).
const (
	armSavesShift = 2
	armSlotShift  = 4
	armSlotMask   = 1<<13 - 1
	armCFAShift   = 17
	// UserAddressMask keeps the 48 bits of an arm64 user address: a
	// return address signed by pointer authentication (or tagged) has
	// its code above them.
	UserAddressMask = 1<<48 - 1
)

// stripPAC clears the bits of reg above a user address (tmp clobbered).
func stripPAC(reg, tmp bpf.Register) bpf.Instructions {
	return bpf.Instructions{
		bpf.LoadImm(tmp, UserAddressMask, bpf.DWord),
		bpf.And.Reg(reg, tmp),
	}
}

// derefRBP computes the CFA of a realigned frame (gcc's DRAP: the rule
// word in R4, shifted, see unwind.DerefRBP): CFA = *(rbp + 8a) into R5,
// R4 = 0, and the caller's rbp = *(rbp + 8b) into the walk's state, then
// joins the common step at p_cfa (the word has no CFA-relative rbp).
func derefRBP(cfg Config, p string) bpf.Instructions {
	var insns asm.Seq
	field := func(shift int32) {
		insns.Add(bpf.LoadMem(bpf.R3, bpf.RFP, fpRule, bpf.DWord))
		insns.Add(bpf.LSh.Imm(bpf.R3, 64-8-shift))
		insns.Add(bpf.ArSh.Imm(bpf.R3, 56))
		insns.Add(bpf.LSh.Imm(bpf.R3, 3))
		insns.Add(bpf.LoadMem(bpf.R1, bpf.R9, stateBP, bpf.DWord))
		insns.Add(bpf.Add.Reg(bpf.R3, bpf.R1))
	}
	field(unwind.DerefShift)
	insns.Instructions[0] = insns.Instructions[0].WithSource(bpf.Comment("realigned (DRAP): cfa = *(rbp + 8a), rbp = *(rbp + 8b)"))
	insns.Append(read8(bpf.RFP, fpCFA, cfg.Readers.User.Call(), "read_error"))
	field(unwind.DerefShift + 8)
	insns.Append(read8(bpf.R9, stateBP, cfg.Readers.User.Call(), "read_error"))
	insns.Add(bpf.LoadMem(bpf.R5, bpf.RFP, fpCFA, bpf.DWord))
	insns.Add(bpf.Mov.Imm(bpf.R4, 0))
	insns.Add(bpf.Ja.Label(p + "_cfa"))
	return insns.Instructions
}

// read8 reads the 8 bytes at the address in R3 into to+off with the read
// helper call; a failed read goes to fail.
func read8(to bpf.Register, off int32, call bpf.Instruction, fail string) bpf.Instructions {
	return bpf.Instructions{
		bpf.Mov.Reg(bpf.R1, to),
		bpf.Add.Imm(bpf.R1, off),
		bpf.Mov.Imm(bpf.R2, 8),
		call,
		bpf.JNE.Imm(bpf.R0, 0, fail),
	}
}

// The x86-64 sigreturn trampoline, glibc's and musl's __restore_rt alike:
// mov $15, %rax (rt_sigreturn); syscall. Its first eight bytes as a
// little-endian u64, and the ninth.
const (
	sigreturnHead = 0x0f0000000fc0c748
	sigreturnTail = 0x05
)

// Where the interrupted code's registers are in the signal frame, from the
// stack pointer at the trampoline (the handler has returned into it,
// popping rt_sigframe.pretcode): the ucontext, whose uc_mcontext (after
// uc_flags, uc_link and uc_stack: 40 bytes) is a struct sigcontext, r8 to
// r15, rdi, rsi, rbp, rbx, rdx, rax, rcx, rsp, rip.
const (
	sigMcontext = 40
	SignalRBP   = sigMcontext + 10*8
	SignalRSP   = sigMcontext + 15*8 // rip follows
)

// signalFrame is where a walk goes that cannot step past a frame (no row,
// a rule it does not follow, no table: the reason in R1): if the code at
// pc is the sigreturn trampoline, the frame is the kernel's signal frame,
// and the walk goes on from the registers it saved (an exact pc: the
// instruction the signal interrupted, not a return address). Else the walk
// stops for that reason. The trampoline has no unwind row (musl), or a CFA
// expression (glibc): only its code says what it is. Every stack that
// ends early pays one read of nine bytes; whole ones pay nothing.
func signalFrame(cfg Config) bpf.Instructions {
	switch cfg.Arch {
	case ARM64:
		return signalFrameARM64(cfg)
	case RISCV64:
		return signalFrameRISCV64(cfg)
	}
	var insns asm.Seq
	insns.Append(signalCode(cfg, 9, "mov $15, %rax; syscall"))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpRead, bpf.DWord))
	insns.Add(bpf.LoadImm(bpf.R2, sigreturnHead, bpf.DWord))
	insns.Add(bpf.JNE.Reg(bpf.R1, bpf.R2, "signal_not"))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpRead+8, bpf.Byte))
	insns.Add(bpf.JNE.Imm(bpf.R1, sigreturnTail, "signal_not"))
	regs := readStack(cfg, SignalRSP, bpf.RFP, fpRead, 16)
	regs[0] = regs[0].WithSource(bpf.Comment("a signal frame: rsp and rip, then rbp, as the signal found them"))
	insns.Append(regs)
	insns.Append(readStack(cfg, SignalRBP, bpf.R9, stateBP, 8))
	insns.Append(signalResume())
	return insns.Instructions
}

// signalCode stores the stop's reason (R1) and reads the n bytes of code
// at pc (the sigreturn trampoline's are code) into fpRead; a failed read
// is no trampoline.
func signalCode(cfg Config, n int32, code string) bpf.Instructions {
	return bpf.Instructions{
		bpf.StoreMem(bpf.RFP, fpRule, bpf.R1, bpf.DWord).WithSymbol("signal").WithSource(bpf.Comment("no step past pc: is it the sigreturn trampoline (" + code + ")?")),
		bpf.Mov.Reg(bpf.R1, bpf.RFP),
		bpf.Add.Imm(bpf.R1, fpRead),
		bpf.Mov.Imm(bpf.R2, n),
		bpf.LoadMem(bpf.R3, bpf.R9, statePC, bpf.DWord),
		cfg.Readers.User.Call(),
		bpf.JNE.Imm(bpf.R0, 0, "signal_not"),
	}
}

// signalResume goes on from the interrupted code's sp and pc (at fpRead),
// an exact pc; signal_not stops for the reason stored.
func signalResume() bpf.Instructions {
	return bpf.Instructions{
		bpf.LoadMem(bpf.R1, bpf.RFP, fpRead, bpf.DWord),
		bpf.StoreMem(bpf.R9, stateSP, bpf.R1, bpf.DWord),
		bpf.LoadMem(bpf.R1, bpf.RFP, fpRead+8, bpf.DWord),
		bpf.StoreMem(bpf.R9, statePC, bpf.R1, bpf.DWord),
		bpf.StoreImm(bpf.R9, stateRA, 0, bpf.Word),
		bpf.Ja.Label("next"),
		bpf.LoadMem(bpf.R1, bpf.RFP, fpRule, bpf.DWord).WithSymbol("signal_not"),
		bpf.Ja.Label("stop"),
	}
}

// arm64's sigreturn trampoline, the vdso's __kernel_rt_sigreturn and
// musl's __restore_rt alike: mov x8, #139 (rt_sigreturn); svc #0, as a
// little-endian u64.
const sigreturnARM64 = -0x2bfffffe2d7fee98 // 0xd4000001d2801168

// Where the interrupted code's registers are in arm64's signal frame, from
// the stack pointer at the trampoline (the frame's start, struct
// rt_sigframe): its siginfo (128 bytes), then the ucontext, whose
// uc_mcontext (after uc_flags, uc_link, uc_stack and a 128-byte
// uc_sigmask, aligned to 16: at 176) is a struct sigcontext,
// fault_address, x0 to x30, sp, pc.
const (
	SignalRegsARM64 = 128 + 176 + 8
	SignalX29ARM64  = SignalRegsARM64 + 29*8 // x30 follows
	SignalSPARM64   = SignalRegsARM64 + 31*8 // pc follows
)

// signalFrameARM64 is signalFrame for arm64: from the trampoline, the
// interrupted code's pc, sp, x29 and x30 (its return address if it saved
// none: a leaf, or a function's first instructions).
func signalFrameARM64(cfg Config) bpf.Instructions {
	var insns asm.Seq
	insns.Append(signalCode(cfg, 8, "mov x8, #139; svc #0"))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpRead, bpf.DWord))
	insns.Add(bpf.LoadImm(bpf.R2, int64(sigreturnARM64), bpf.DWord))
	insns.Add(bpf.JNE.Reg(bpf.R1, bpf.R2, "signal_not"))
	regs := readStack(cfg, SignalX29ARM64, bpf.RFP, fpRead, 16)
	regs[0] = regs[0].WithSource(bpf.Comment("a signal frame: x29 and x30, then sp and pc, as the signal found them"))
	insns.Append(regs)
	insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpRead, bpf.DWord))
	insns.Add(bpf.StoreMem(bpf.R9, stateBP, bpf.R1, bpf.DWord))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpRead+8, bpf.DWord))
	insns.Add(bpf.StoreMem(bpf.R9, stateLR, bpf.R1, bpf.DWord))
	insns.Append(readStack(cfg, SignalSPARM64, bpf.RFP, fpRead, 16))
	insns.Append(signalResume())
	return insns.Instructions
}

// riscv64's sigreturn trampoline, the vdso's __vdso_rt_sigreturn and
// musl's __restore_rt alike: li a7, 139 (rt_sigreturn); ecall, as a
// little-endian u64.
const sigreturnRISCV64 = 0x0000007308b00893

// Where the interrupted code's registers are in riscv64's signal frame,
// from the stack pointer at the trampoline (struct rt_sigframe): its
// siginfo (128 bytes), then the ucontext, whose uc_mcontext (after
// uc_flags, uc_link, uc_stack, an 8-byte uc_sigmask and 120 bytes of
// room for it, aligned to 16: at 176) begins with struct user_regs_struct:
// pc, ra, sp, ..., s0.
const (
	SignalRegsRISCV64 = 128 + 176
	SignalPCRISCV64   = SignalRegsRISCV64 // ra follows
	SignalSPRISCV64   = SignalRegsRISCV64 + 16
	SignalS0RISCV64   = SignalRegsRISCV64 + 64
)

// signalFrameRISCV64 is signalFrame for riscv64: from the trampoline,
// the interrupted code's s0, pc and ra (its return address if it saved
// none: a leaf, or a function's first instructions), then sp.
func signalFrameRISCV64(cfg Config) bpf.Instructions {
	var insns asm.Seq
	insns.Append(signalCode(cfg, 8, "li a7, 139; ecall"))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpRead, bpf.DWord))
	insns.Add(bpf.LoadImm(bpf.R2, sigreturnRISCV64, bpf.DWord))
	insns.Add(bpf.JNE.Reg(bpf.R1, bpf.R2, "signal_not"))
	regs := readStack(cfg, SignalS0RISCV64, bpf.R9, stateBP, 8)
	regs[0] = regs[0].WithSource(bpf.Comment("a signal frame: s0, then pc and ra, then sp, as the signal found them"))
	insns.Append(regs)
	insns.Append(readStack(cfg, SignalPCRISCV64, bpf.RFP, fpRead, 16))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpRead+8, bpf.DWord))
	insns.Add(bpf.StoreMem(bpf.R9, stateLR, bpf.R1, bpf.DWord))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpRead, bpf.DWord))
	insns.Add(bpf.StoreMem(bpf.RFP, fpRead+8, bpf.R1, bpf.DWord))
	insns.Append(readStack(cfg, SignalSPRISCV64, bpf.RFP, fpRead, 8))
	insns.Append(signalResume())
	return insns.Instructions
}

// readStack reads size bytes of the user stack at the walk's sp + off
// into dst + dstOff; a failed read ends the walk (read_error).
func readStack(cfg Config, off int32, dst bpf.Register, dstOff, size int32) bpf.Instructions {
	return bpf.Instructions{
		bpf.LoadMem(bpf.R3, bpf.R9, stateSP, bpf.DWord),
		bpf.Add.Imm(bpf.R3, off),
		bpf.Mov.Reg(bpf.R1, dst),
		bpf.Add.Imm(bpf.R1, dstOff),
		bpf.Mov.Imm(bpf.R2, size),
		cfg.Readers.User.Call(),
		bpf.JNE.Imm(bpf.R0, 0, "read_error"),
	}
}

// noTable steps a frame whose mapping is known to have no table (JIT
// code, a file without unwind information or past the table's room): eh
// stops there; auto steps by the frame pointer where that is plausible (a
// frame above the stack pointer, within 8 MiB of it, aligned), and marks
// the key: frame pointers are a guess in code built without them.
func noTable(cfg Config, p, next string) bpf.Instructions {
	var insns asm.Seq
	if cfg.Mode == UnwindEH {
		insns.Add(bpf.Ja.Label("no_table").WithSymbol(p + "_notable"))
		return insns.Instructions
	}
	first := bpf.LoadMem(bpf.R3, bpf.R9, stateBP, bpf.DWord).WithSource(bpf.Comment("frame pointers: {saved rbp, return address} at rbp, if rbp is a plausible frame"))
	if cfg.Arch == RISCV64 {
		first = first.WithSource(bpf.Comment("frame pointers: {saved s0, return address} below s0 (the caller's sp), if s0 is a plausible frame"))
	}
	if cfg.Arch.linkRegister() {
		// The vdso's trampoline has no table, and a frame record that
		// holds the link register, not pc: the signal frame has them both.
		code, sigreturn := "mov x8, #139; svc #0", int64(sigreturnARM64)
		if cfg.Arch == RISCV64 {
			code, sigreturn = "li a7, 139; ecall", sigreturnRISCV64
		}
		insns.Add(bpf.Mov.Reg(bpf.R1, bpf.RFP).WithSymbol(p + "_notable").WithSource(bpf.Comment("not the sigreturn trampoline (" + code + "): its frame record is not the interrupted code's")))
		insns.Add(bpf.Add.Imm(bpf.R1, fpRead))
		insns.Add(bpf.Mov.Imm(bpf.R2, 8))
		insns.Add(bpf.LoadMem(bpf.R3, bpf.R9, statePC, bpf.DWord))
		insns.Add(cfg.Readers.User.Call())
		insns.Add(bpf.JNE.Imm(bpf.R0, 0, p+"_fp"))
		insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpRead, bpf.DWord))
		insns.Add(bpf.LoadImm(bpf.R2, sigreturn, bpf.DWord))
		insns.Add(bpf.JEq.Reg(bpf.R1, bpf.R2, "no_table"))
		insns.Add(first.WithSymbol(p + "_fp"))
	} else {
		insns.Add(first.WithSymbol(p + "_notable"))
	}
	insns.Add(bpf.JEq.Imm(bpf.R3, 0, "end"))
	insns.Add(bpf.LoadMem(bpf.R2, bpf.R9, stateSP, bpf.DWord))
	if cfg.Arch == ARM64 {
		// Go's arm64 frames keep x29 8 bytes below sp (the frame pointer
		// saved at sp-8, the return address at sp).
		insns.Add(bpf.Mov.Reg(bpf.R1, bpf.R3).WithSource(bpf.Comment("x29 at sp-8 or above (Go's frames), within 8 MiB")))
		insns.Add(bpf.Add.Imm(bpf.R1, 8))
		insns.Add(bpf.JGT.Reg(bpf.R2, bpf.R1, "no_table"))
		insns.Add(bpf.Sub.Reg(bpf.R1, bpf.R2))
	} else {
		insns.Add(bpf.JGE.Reg(bpf.R2, bpf.R3, "no_table"))
		insns.Add(bpf.Mov.Reg(bpf.R1, bpf.R3))
		insns.Add(bpf.Sub.Reg(bpf.R1, bpf.R2))
	}
	insns.Add(bpf.JGT.Imm(bpf.R1, MaxFrame, "no_table"))
	insns.Add(bpf.Mov.Reg(bpf.R1, bpf.R3))
	insns.Add(bpf.And.Imm(bpf.R1, 7))
	insns.Add(bpf.JNE.Imm(bpf.R1, 0, "no_table"))
	if cfg.Arch == RISCV64 {
		insns.Add(bpf.Sub.Imm(bpf.R3, 16))
	}
	insns.Add(bpf.Mov.Reg(bpf.R1, bpf.RFP))
	insns.Add(bpf.Add.Imm(bpf.R1, fpRead))
	insns.Add(bpf.Mov.Imm(bpf.R2, 16))
	insns.Add(cfg.Readers.User.Call())
	insns.Add(bpf.JNE.Imm(bpf.R0, 0, "read_error"))
	insns.Add(bpf.StoreImm(bpf.R9, keyFP, 1, bpf.Byte))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.R9, stateBP, bpf.DWord))
	if cfg.Arch != RISCV64 {
		insns.Add(bpf.Add.Imm(bpf.R1, 16))
	}
	insns.Add(bpf.StoreMem(bpf.R9, stateSP, bpf.R1, bpf.DWord))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpRead, bpf.DWord))
	insns.Add(bpf.StoreMem(bpf.R9, stateBP, bpf.R1, bpf.DWord))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpRead+8, bpf.DWord))
	if cfg.Arch == ARM64 {
		insns.Append(stripPAC(bpf.R1, bpf.R2))
	}
	insns.Add(bpf.StoreMem(bpf.R9, statePC, bpf.R1, bpf.DWord))
	insns.Add(bpf.Ja.Label(next))
	return insns.Instructions
}

// MaxFrame is the most a frame-pointer step may move up the stack.
const MaxFrame = 8 << 20

// deferred ends a walk that met an address in no mapping it knows (a
// process, or a library, not read yet: the first milliseconds of a
// process): instead of counting a stack cut short, it sends the walk's
// state, the key so far and a copy of the top of the user stack to user
// space (EventStack), which unwinds the rest with the same rules once the
// file's table is read. The copy ends where the process's stack started
// (mm->start_stack) if that is within StackCopy, else it is StackCopy
// bytes, or 2048, or 512, the first that can be read; the record ends with
// the copy (a main thread's shallow stack: a few hundred bytes, not 8 KiB,
// so the ring holds tens of records, not a dozen). If the record cannot be
// sent (the ring is full), the stack is counted as it is, with no table.
func deferred(cfg Config) bpf.Instructions {
	var insns asm.Seq
	insns.Add(bpf.LoadMem(bpf.R1, bpf.R9, keyPid, bpf.Word).WithSymbol("deferred").WithSource(bpf.Comment("an address in no known mapping: defer the sample to user space with a copy of the stack")))
	if cfg.OffCPU != nil {
		insns.Add(bpf.LoadMem(bpf.R2, bpf.R9, stateWait, bpf.Word).WithSource(bpf.Comment("off-CPU: only a thread going to sleep, not one preempted")))
		insns.Add(bpf.JEq.Imm(bpf.R2, 0, "no_table"))
		insns.Add(bpf.LoadMem(bpf.R2, bpf.R9, stashTime, bpf.DWord).WithSource(bpf.Comment("the switch-out time goes with the record: it names the wait")))
		insns.Add(bpf.StoreMem(bpf.R9, int16(cfg.waitTimeOff()), bpf.R2, bpf.DWord))
	}
	insns.Add(bpf.StoreMem(bpf.R9, deferHeader, bpf.R1, bpf.Word))
	insns.Add(bpf.StoreImm(bpf.R9, deferHeader+4, EventStack, bpf.Word))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpLookup, bpf.DWord))
	insns.Add(bpf.StoreMem(bpf.R9, deferHeader+8, bpf.R1, bpf.DWord))
	for i, off := range []int16{statePC, stateSP, stateBP} {
		insns.Add(bpf.LoadMem(bpf.R1, bpf.R9, off, bpf.DWord))
		insns.Add(bpf.StoreMem(bpf.R9, deferHeader+16+8*int16(i), bpf.R1, bpf.DWord))
	}
	if cfg.Arch.linkRegister() {
		insns.Add(bpf.LoadMem(bpf.R1, bpf.R9, stateLR, bpf.DWord))
		insns.Add(bpf.StoreMem(bpf.R9, deferHeader+40, bpf.R1, bpf.DWord))
	}
	insns.Add(bpf.Mov.Imm(bpf.R6, StackCopy))
	if ss := cfg.StartStack; ss != nil {
		insns.Append(currentU64(cfg, ss.MM, fpRead, fmt.Sprintf("the copy's size: up to current->mm (+%d)->start_stack (+%d), if within it", ss.MM, ss.StartStack)))
		insns.Add(bpf.JNE.Imm(bpf.R0, 0, "deferred_copy"))
		insns.Add(bpf.LoadMem(bpf.R3, bpf.RFP, fpRead, bpf.DWord))
		insns.Add(bpf.JEq.Imm(bpf.R3, 0, "deferred_copy"))
		insns.Add(bpf.Add.Imm(bpf.R3, int32(ss.StartStack)))
		insns.Append(read8(bpf.RFP, fpRead, cfg.Readers.Kernel.Call(), "deferred_copy"))
		insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpRead, bpf.DWord))
		insns.Add(bpf.LoadMem(bpf.R2, bpf.R9, stateSP, bpf.DWord))
		insns.Add(bpf.JGE.Reg(bpf.R2, bpf.R1, "deferred_copy"))
		insns.Add(bpf.Sub.Reg(bpf.R1, bpf.R2))
		insns.Add(bpf.JGT.Imm(bpf.R1, StackCopy, "deferred_copy"))
		insns.Add(bpf.Mov.Reg(bpf.R6, bpf.R1))
	}
	copyStack := func(label string, size int32) {
		if size > 0 {
			insns.Add(bpf.Mov.Imm(bpf.R6, size).WithSymbol(label))
			label = ""
		}
		first := bpf.Mov.Reg(bpf.R1, bpf.R9)
		if label != "" {
			first = first.WithSymbol(label)
		}
		insns.Add(first)
		insns.Add(bpf.Add.Imm(bpf.R1, int32(cfg.stackOff())))
		insns.Add(bpf.Mov.Reg(bpf.R2, bpf.R6))
		insns.Add(bpf.LoadMem(bpf.R3, bpf.R9, stateSP, bpf.DWord))
		insns.Add(cfg.Readers.User.Call())
		insns.Add(bpf.JEq.Imm(bpf.R0, 0, "deferred_send"))
	}
	copyStack("deferred_copy", 0)
	copyStack("", 2048)
	copyStack("", 512)
	insns.Add(bpf.Mov.Imm(bpf.R6, 0))
	insns.Add(bpf.StoreMem(bpf.R9, deferHeader+48, bpf.R6, bpf.DWord).WithSymbol("deferred_send"))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpCtx, bpf.DWord).WithSource(bpf.Comment(fmt.Sprintf("bpf_perf_event_output(ctx, stacks, BPF_F_CURRENT_CPU, header, %d + the copy's length): not counted here", cfg.DeferredSize()-StackCopy))))
	insns.Append(outputSized("stacks", bpf.R9, deferHeader, bpf.R6, int32(cfg.DeferredSize()-StackCopy)))
	if cfg.OffCPU == nil {
		insns.Add(bpf.JEq.Imm(bpf.R0, 0, "exit"))
		insns.Add(bpf.Ja.Label("no_table"))
		return insns.Instructions
	}
	// Off-CPU: the header took the switch-out time's place; it is put
	// back, and the key is stashed marked deferred: when the thread runs
	// again, its wait goes to user space, which has its stack.
	insns.Add(bpf.LoadMem(bpf.R1, bpf.R9, int16(cfg.waitTimeOff()), bpf.DWord).WithSource(bpf.Comment("the switch-out time back, for the stash")))
	insns.Add(bpf.StoreMem(bpf.R9, stashTime, bpf.R1, bpf.DWord))
	insns.Add(bpf.JNE.Imm(bpf.R0, 0, "no_table"))
	insns.Add(bpf.Mov.Imm(bpf.R1, StopDeferred))
	insns.Add(bpf.Ja.Label("stop"))
	return insns.Instructions
}

// exitProg runs at sched:sched_process_exit. When the exiting thread is
// its process's last (signal->live, which do_exit has already counted
// down, is 0), a process sampled before is forgotten: seen and labels lose
// its pid, and user space is told. A new process that gets the pid again
// is then announced at its first sample, and its labels are placed anew:
// without this, it was read at the places of the one that had the pid.
func exitProg(cfg Config) bpf.Instructions {
	var insns asm.Seq
	insns.Add(bpf.StoreMem(bpf.RFP, fpCtx, bpf.R1, bpf.DWord))
	insns.Append(asm.CurrentPid())
	if cfg.NS != nil {
		insns.Append(asm.CurrentNsPid(*cfg.NS, fpRead))
		insns.Append(asm.Note(bpf.Instructions{bpf.JEq.Imm(asm.RegPid, 0, "exit")}, "a task outside this pid namespace: never seen"))
	}
	insns.Add(asm.StoreKey(fpTgid, asm.RegPid, bpf.Word))
	insns.Append(currentU64(cfg, cfg.Exit.Signal, fpRead, fmt.Sprintf("current->signal (+%d)", cfg.Exit.Signal)))
	insns.Add(bpf.LoadMem(bpf.R3, bpf.RFP, fpRead, bpf.DWord))
	insns.Add(bpf.JEq.Imm(bpf.R3, 0, "exit"))
	insns.Add(bpf.Add.Imm(bpf.R3, int32(cfg.Exit.Live)).WithSource(bpf.Comment(fmt.Sprintf("signal->live (+%d): the threads still running; 0 when this one is the last", cfg.Exit.Live))))
	insns.Add(bpf.Mov.Reg(bpf.R1, bpf.RFP))
	insns.Add(bpf.Add.Imm(bpf.R1, fpRead))
	insns.Add(bpf.Mov.Imm(bpf.R2, 4))
	insns.Add(cfg.Readers.Kernel.Call())
	insns.Add(bpf.JNE.Imm(bpf.R0, 0, "exit"))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpRead, bpf.Word))
	insns.Add(bpf.JNE.Imm(bpf.R1, 0, "exit"))
	insns.Append(asm.Note(asm.MapDelete("seen", fpTgid), "the process is gone: forget it (not seen: nothing to tell)"))
	insns.Add(bpf.JNE.Imm(bpf.R0, 0, "exit"))
	if len(cfg.Labels) > 0 || cfg.Context {
		insns.Append(asm.MapDelete("labels", fpTgid))
	}
	insns.Append(notify(EventExit))
	insns.Append(asm.Return("exit", 0))
	return insns.Instructions
}

// execProg tells user space that a process exec'd whose mappings it must
// read at once (the libraries the loader maps next are found when the
// unwinder first misses in them, or at the next rescan): a process sampled
// before, or (-c) any process of the command's tree, which is marked seen.
// Without that, a child of the command was first read at its first sample,
// and the samples taken until its tables were loaded fell back to frame
// pointers, which a program built without them turns to garbage.
func execProg(cfg Config) bpf.Instructions {
	var insns asm.Seq
	insns.Add(bpf.StoreMem(bpf.RFP, fpCtx, bpf.R1, bpf.DWord))
	insns.Append(asm.CurrentPid())
	if cfg.Tree != nil {
		insns.Add(asm.StoreKey(fpTgid, asm.RegPid, bpf.Word))
		insns.Append(asm.Note(asm.MapLookup(proctree.PidsMap, fpTgid), "r8 = in the command's tree (the kernel's pid)"))
		insns.Add(bpf.Mov.Reg(bpf.R8, bpf.R0))
	}
	if cfg.NS != nil {
		insns.Append(asm.CurrentNsPid(*cfg.NS, fpRead))
	}
	insns.Add(asm.StoreKey(fpTgid, asm.RegPid, bpf.Word))
	insns.Append(asm.Note(asm.MapLookup("seen", fpTgid), "exec of a process seen before: tell user space"))
	if cfg.Tree == nil {
		insns.Add(bpf.JEq.Imm(bpf.R0, 0, "exit"))
	} else {
		insns.Add(bpf.JNE.Imm(bpf.R0, 0, "tell"))
		insns.Add(bpf.JEq.Imm(bpf.R8, 0, "exit"))
		insns.Add(bpf.Mov.Imm(bpf.R1, 0).WithSource(bpf.Comment("a process of the tree: seen now (its first sample tells nothing new)")))
		insns.Add(bpf.StoreMem(bpf.RFP, fpNow, bpf.R1, bpf.DWord))
		insns.Append(asm.MapUpdate("seen", fpTgid, fpNow, asm.UpdateNoExist))
		insns.Add(asm.Nop().WithSymbol("tell"))
	}
	insns.Append(notify(EventNew))
	insns.Append(asm.Return("exit", 0))
	return insns.Instructions
}
