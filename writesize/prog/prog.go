// Package prog builds writesize's program: each write(2)'s size counted
// into log2 slots, for all or per process, at the syscall tracepoint, raw
// sys_enter, a kprobe or fentry on the write syscall.
package prog

import (
	"fmt"

	"github.com/cilium/ebpf"
	bpf "github.com/cilium/ebpf/asm"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/internal/slots"
	"github.com/tracekit/tracekit/proctree"
	"github.com/tracekit/tracekit/tracefs"
)

// MaxKeys is the per-process hashes' size unless Config.MaxKeys says
// otherwise: {pid, slot} pairs, a second's worth (one process needs at
// most 64); more in one second are counted as lost, never dropped.
// MaxKeysLimit bounds what a user may ask for.
const (
	MaxKeys      = 10240
	MaxKeysLimit = 1 << 20
)

// HistSwap is the per-process program's second hash, GenMap the array
// whose u32 says which of the two it counts in.
const (
	HistSwap = "hist1"
	GenMap   = "gen"
)

// MaxComms is the name map's size unless Config.Comms says otherwise: a
// process beyond it that has exited by the report prints as "?".
// MaxCommsLimit bounds what a user may ask for (20 bytes an entry).
const (
	MaxComms      = 4096
	MaxCommsLimit = 1 << 16
)

// Config says what program to build.
type Config struct {
	Count      tracefs.Field  // the size field: sys_enter_write's count
	Pid        uint32         // only this process; 0 for all
	Tree       *proctree.Tree // only the processes in proctree.PidsMap (-c)
	PerProcess bool           // one histogram per process
	Comms      uint32         // PerProcess: the name map's size; 0 is MaxComms
	MaxKeys    uint32         // PerProcess: each hash's size; 0 is MaxKeys
	// NS: this runs in a pid namespace of its own; Pid and the
	// per-process keys are that namespace's pids (the tree holds the
	// kernel's, see proctree.Add).
	NS *asm.PidNS
	// Kprobe reads the size from the registers at a kprobe on the write
	// syscall function instead of the tracepoint record.
	Kprobe *Kprobe
	// Raw reads it at the raw tracepoint raw_syscalls:sys_enter (4.17+),
	// sys_enter(regs, id), which runs for every syscall: the program
	// leaves at once unless id is write's.
	Raw *Raw
	// Fentry reads it at the entry of the write syscall's wrapper
	// (__x64_sys_write, __arm64_sys_write) through a BPF trampoline: only
	// writes run it, and the wrapper's pt_regs is a typed pointer, read
	// directly.
	Fentry *Fentry
}

// Fentry says where the fentry program is and how it finds count.
type Fentry struct {
	Symbol string    // the wrapper: its one argument is the user's pt_regs
	Regs   *asm.Regs // count is that struct's third argument register
}

// Raw says how the raw sys_enter program finds a write's size.
type Raw struct {
	NR        int32     // write's syscall number on this architecture
	Regs      *asm.Regs // the third argument's register in the user's pt_regs
	ProbeRead bpf.BuiltinFunc
}

// WriteNR is write(2)'s number by architecture.
var WriteNR = map[string]int32{"amd64": 1, "arm64": 64, "riscv64": 64, "arm": 4}

// Kprobe says where the size is at the probed function's entry.
type Kprobe struct {
	Symbol string
	// Wrapper: a syscall wrapper (__x64_sys_write or __arm64_sys_write,
	// 4.17+), whose one argument is the user's struct pt_regs: count is
	// that struct's third argument register (dx, x2), read with ProbeRead.
	// Otherwise count is the third argument itself (ksys_write, or
	// sys_write on old kernels).
	Wrapper   bool
	ProbeRead bpf.BuiltinFunc
	Regs      *asm.Regs // where the arguments are in pt_regs
}

// Stack layout of the per-process program.
const (
	keyOff  = -8  // {u32 pid; u32 slot}; its first 4 bytes double as the comm key
	valOff  = -16 // initial value of an insert, and the lost map's key
	commOff = -32 // 16 bytes of task name
	treeOff = -36 // key of the process-tree lookup
	readOff = -48 // probe-read buffer
	nsOff   = -56 // bpf_get_ns_current_pid_tgid's result
)

// Program returns the instructions of the write-size program: read count,
// compute its log2 slot, count it. It never lets the event through (return
// 0): all aggregation happens in the kernel.
func Program(cfg Config) (bpf.Instructions, error) {
	load, err := loadCount(cfg)
	if err != nil {
		return nil, err
	}
	var insns asm.Seq
	insns.Append(asm.Prologue())
	if r := cfg.Raw; r != nil {
		insns.Add(bpf.LoadMem(bpf.R1, asm.RegCtx, 8, bpf.DWord).WithSource(bpf.Comment("r1 = the syscall's number (args[1]); not write: leave")))
		insns.Add(bpf.JNE.Imm(bpf.R1, r.NR, "exit"))
	}
	nsPids := cfg.NS != nil && (cfg.Pid != 0 || cfg.PerProcess)
	if cfg.Tree != nil || (cfg.Pid != 0 || cfg.PerProcess) && !nsPids {
		insns.Append(asm.CurrentPid())
	}
	if cfg.Tree != nil {
		insns.Append(asm.PidInSet(proctree.PidsMap, treeOff, "exit"))
	}
	if nsPids {
		insns.Append(asm.CurrentNsPid(*cfg.NS, nsOff))
	}
	if cfg.Pid != 0 {
		insns.Append(asm.PidFilter(cfg.Pid, "exit"))
	}
	insns.Append(load)
	insns.Append(asm.Log2Slot("slot", bpf.R1, bpf.R2, bpf.R3))
	if cfg.PerProcess {
		insns.Add(asm.StoreKey(keyOff, asm.RegPid, bpf.Word))
		insns.Add(asm.StoreKey(keyOff+4, bpf.R3, bpf.Word))
		// Two hashes, one counting while user space drains the other
		// every second: the kernel holds a second's processes, whatever
		// the run's length. A process's name is stored when it enters
		// either.
		insns.Append(asm.SwappedHashIncrement("count", [2]string{"hist", HistSwap}, GenMap, keyOff, valOff, "lost", asm.StoreComm("comms", keyOff, commOff)))
	} else {
		insns.Add(asm.StoreKey(-4, bpf.R3, bpf.Word))
		insns.Append(asm.PerCPUArrayIncrement("count", "hist", -4))
	}
	insns.Append(asm.Return("exit", 0))
	return insns.Instructions, nil
}

// loadCount puts the write's size into R1.
func loadCount(cfg Config) (bpf.Instructions, error) {
	if r := cfg.Raw; r != nil {
		var insns asm.Seq
		insns.Add(bpf.LoadMem(bpf.R4, asm.RegCtx, 0, bpf.DWord).
			WithSource(bpf.Comment(fmt.Sprintf("sys_enter(regs, id): count = regs->%s", r.Regs.ArgNames[2]))))
		insns.Add(bpf.Add.Imm(bpf.R4, int32(r.Regs.Args[2])))
		insns.Append(asm.ProbeRead(bpf.R1, bpf.R4, r.Regs.Load(), readOff, r.ProbeRead))
		return insns.Instructions, nil
	}
	if f := cfg.Fentry; f != nil {
		return bpf.Instructions{
			bpf.LoadMem(bpf.R4, asm.RegCtx, 0, bpf.DWord).
				WithSource(bpf.Comment(fmt.Sprintf("%s(const struct pt_regs *regs): count = regs->%s, a typed pointer's member", f.Symbol, f.Regs.ArgNames[2]))),
			bpf.LoadMem(bpf.R1, bpf.R4, f.Regs.Args[2], f.Regs.Load()),
		}, nil
	}
	k := cfg.Kprobe
	if k == nil {
		return asm.LoadField(bpf.R1, cfg.Count.Name, cfg.Count.Offset, cfg.Count.Size, false)
	}
	count := k.Regs.Args[2]
	if !k.Wrapper {
		return bpf.Instructions{
			bpf.LoadMem(bpf.R1, asm.RegCtx, count, k.Regs.Load()).
				WithSource(bpf.Comment(fmt.Sprintf("r1 = count: third argument of %s (ctx->%s)", k.Symbol, k.Regs.ArgNames[2]))),
		}, nil
	}
	var insns asm.Seq
	insns.Add(bpf.LoadMem(bpf.R4, asm.RegCtx, k.Regs.Args[0], k.Regs.Load()).
		WithSource(bpf.Comment(fmt.Sprintf("%s(const struct pt_regs *regs): count = regs->%s", k.Symbol, k.Regs.ArgNames[2]))))
	insns.Add(bpf.Add.Imm(bpf.R4, int32(count)))
	insns.Append(asm.ProbeRead(bpf.R1, bpf.R4, k.Regs.Load(), readOff, k.ProbeRead))
	return insns.Instructions, nil
}

// Collection returns the maps and the program, ready for loader.Load.
func Collection(cfg Config) (*ebpf.CollectionSpec, error) {
	insns, err := Program(cfg)
	if err != nil {
		return nil, err
	}
	maps := map[string]*ebpf.MapSpec{}
	if cfg.PerProcess {
		comms := cfg.Comms
		if comms == 0 {
			comms = MaxComms
		}
		keys := cfg.MaxKeys
		if keys == 0 {
			keys = MaxKeys
		}
		maps["hist"] = &ebpf.MapSpec{Name: "writesize_hist", Type: ebpf.Hash, KeySize: 8, ValueSize: 8, MaxEntries: keys}
		maps[HistSwap] = &ebpf.MapSpec{Name: "writesize_hist1", Type: ebpf.Hash, KeySize: 8, ValueSize: 8, MaxEntries: keys}
		maps[GenMap] = &ebpf.MapSpec{Name: "writesize_gen", Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1}
		// A process's name, stored when it enters a hash; user space
		// deletes the names of the processes it drained that have exited.
		maps["comms"] = &ebpf.MapSpec{Name: "writesize_comm", Type: ebpf.Hash, KeySize: 4, ValueSize: 16, MaxEntries: comms}
		maps["lost"] = &ebpf.MapSpec{Name: "writesize_lost", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 1}
	} else {
		maps["hist"] = &ebpf.MapSpec{Name: "writesize_hist", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: slots.Log2}
	}
	progType := ebpf.TracePoint
	if cfg.Kprobe != nil {
		progType = ebpf.Kprobe
	} else if cfg.Raw != nil {
		progType = ebpf.RawTracepoint
	}
	prog := &ebpf.ProgramSpec{Name: "writesize", Type: progType, License: "GPL", Instructions: insns}
	if cfg.Fentry != nil {
		prog.Type, prog.AttachType, prog.AttachTo = ebpf.Tracing, ebpf.AttachTraceFEntry, cfg.Fentry.Symbol
	}
	spec := &ebpf.CollectionSpec{
		Maps:     maps,
		Programs: map[string]*ebpf.ProgramSpec{"writesize": prog},
	}
	if cfg.Tree != nil {
		if err := proctree.Add(spec, cfg.Tree); err != nil {
			return nil, err
		}
	}
	return spec, nil
}
