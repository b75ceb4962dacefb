// Package prog builds the stack pipeline's programs: a sampler (at a CPU
// clock, at sched_switch, or at a tool's event) that keys each sample by
// its kernel and user stacks, the user stack unwound in the kernel by
// frame pointers or by the unwind tables user space loads (a tail-called
// walker), and the exec and exit hooks that keep the processes' records.
//
// The files: layout.go (the scratch value, the key and the maps' shapes,
// Config), prog.go (the collection), sampler.go, walker.go and
// rowsearch.go (the frame walker and its row search), signal.go with
// arm64_frames.go and riscv64_frames.go (each architecture's registers
// and signal frames), deferred.go (samples sent to user space to unwind),
// process.go (exec and exit), offcpu.go, labels.go, context.go.
package prog

import (
	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/proctree"
	"github.com/tracekit/tracekit/unwind"
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

// 0xd4000001d2801168
