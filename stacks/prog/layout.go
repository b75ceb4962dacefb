package prog

import (
	"errors"
	"math/bits"

	"github.com/cilium/ebpf"
	bpf "github.com/cilium/ebpf/asm"
	"github.com/tracekit/tracekit/asm"
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

// CopyBelow is how far below the stack pointer a deferred sample's copy
// of the stack starts: 16 bytes on arm64, where Go keeps a function's
// frame record below its frame (its prologue saves the caller's x29 at
// SP-8 and points x29 there; its return address is at 0(SP) just above),
// so a copy from SP had the walk in user space stop after the first Go
// frame (StopRead) where the kernel's, reading memory, goes on. 0
// elsewhere: C's frame records, and x86-64's and riscv64's, lie above SP.
func (a Arch) CopyBelow() uint64 {
	if a == ARM64 {
		return 16
	}
	return 0
}

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

func (c Config) UserOffset() int { return c.KernelOffset() + 8*c.KernelDepth }

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
