package kernel

import (
	"errors"
	"runtime"
	"strconv"
	"sync"

	"github.com/cilium/ebpf"
	bpf "github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
	"golang.org/x/sys/unix"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/loader"
)

// Memory-reading helpers by kernel: bpf_probe_read (4.1) reads kernel and
// user memory alike; 5.5 split it into _kernel and _user, and plain
// bpf_probe_read is refused under lockdown and on architectures where the
// two address spaces overlap. The four 5.5 helpers came in one commit, so
// one of them is probed, once, from a kprobe program (the probe loads a
// tiny program; it needs the privileges the tools need): every probe is a
// program load in each tool's start.
var readers = sync.OnceValue(func() asm.Readers {
	if features.HaveProgramHelper(ebpf.Kprobe, bpf.FnProbeReadKernel) == nil {
		return asm.NewReaders
	}
	return asm.OldReaders
})

// Readers are the reading helpers of this kernel, probed once.
func Readers() asm.Readers { return readers() }

// HashKeyFits reports whether a hash map takes keys of size bytes: 5.10
// refuses keys above MAX_BPF_STACK (512 bytes) with E2BIG, 6.1 takes them.
// Any other refusal (no permission, no memory) is not about the key: it
// fits, and the tool's own load says what is wrong.
func HashKeyFits(size int) bool {
	_ = loader.RemoveMemlock() // before 5.11 map memory counts against RLIMIT_MEMLOCK
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: uint32(size), ValueSize: 8, MaxEntries: 1})
	if err != nil {
		return !errors.Is(err, unix.E2BIG) && !errors.Is(err, unix.EINVAL)
	}
	m.Close()
	return true
}

// HaveTaskPtRegs reports whether perf_event programs may call
// bpf_task_pt_regs (5.15+): the user registers of a sample taken in the
// kernel.
func HaveTaskPtRegs() bool {
	return features.HaveProgramHelper(ebpf.PerfEvent, bpf.FnTaskPtRegs) == nil
}

// HaveAtomicCmpXchg reports whether programs may use BPF_ATOMIC compare
// and exchange on map values (5.12+, and a JIT that emits it), probed once
// by loading a tracepoint program that uses it.
var HaveAtomicCmpXchg = sync.OnceValue(func() bool {
	return loads(ebpf.TracePoint, &ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1},
		bpf.Mov.Reg(bpf.R1, bpf.R0), bpf.Mov.Imm(bpf.R0, 0), bpf.Mov.Imm(bpf.R2, 1), asm.CmpXchg(bpf.R1, bpf.R2, bpf.DWord, 0))
})

// HaveLazyHashes reports whether perf_event programs may use hash maps
// that allocate their entries as they are inserted (BPF_F_NO_PREALLOC;
// 6.1's BPF memory allocator lifted the "perf_event programs can only use
// preallocated hash map" rule). A preallocated map costs its whole size in
// kernel memory and clearing time at every start: profile's stack counts
// are 6 MiB of it.
//
// Never for a 32-bit binary (a 32-bit kernel, as a rule): that allocator
// puts each entry after a pointer-sized list node, so on a 32-bit kernel
// a value is only 4-byte aligned, and an 8-byte atomic add on it traps on
// 32-bit ARM (ldrexd: "Alignment trap", a kernel panic in the interpreter
// on Debian's 6.1 armmp).
var HaveLazyHashes = sync.OnceValue(func() bool {
	if strconv.IntSize == 32 {
		return false
	}
	return loads(ebpf.PerfEvent, &ebpf.MapSpec{Type: ebpf.Hash, KeySize: 4, ValueSize: 8, MaxEntries: 1, Flags: unix.BPF_F_NO_PREALLOC})
})

// loads reports whether a program of typ that looks up key 0 of a map
// made from spec, then runs tail on the value (in R0, not NULL), loads.
func loads(typ ebpf.ProgramType, spec *ebpf.MapSpec, tail ...bpf.Instruction) bool {
	_ = loader.RemoveMemlock()
	m, err := ebpf.NewMap(spec)
	if err != nil {
		return false
	}
	defer m.Close()
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: typ, License: "GPL", Instructions: lookupProgram(m, tail...)})
	if err != nil {
		return false
	}
	p.Close()
	return true
}

// lookupProgram looks up key 0 of m, runs tail with the value in R0 when
// there is one, and returns 0.
func lookupProgram(m *ebpf.Map, tail ...bpf.Instruction) bpf.Instructions {
	insns := bpf.Instructions{
		bpf.Mov.Imm(bpf.R1, 0),
		bpf.StoreMem(bpf.RFP, -4, bpf.R1, bpf.Word),
		bpf.LoadMapPtr(bpf.R1, m.FD()),
		bpf.Mov.Reg(bpf.R2, bpf.RFP),
		bpf.Add.Imm(bpf.R2, -4),
		bpf.FnMapLookupElem.Call(),
		bpf.JEq.Imm(bpf.R0, 0, "exit"),
	}
	insns = append(insns, tail...)
	return append(insns, bpf.Mov.Imm(bpf.R0, 0).WithSymbol("exit"), bpf.Return())
}

// HaveSnprintfBTF reports whether tracing programs may call
// bpf_snprintf_btf (5.10+): a kernel structure written as text from BTF.
// Only the kernel's "not supported" says no: a probe that fails otherwise
// (5.10 charges BPF memory to RLIMIT_MEMLOCK, which another tool's rings
// may have used up) leaves the answer to the real load, whose error says
// what happened.
func HaveSnprintfBTF() bool {
	_ = loader.RemoveMemlock()
	err := features.HaveProgramHelper(ebpf.Kprobe, bpf.FnSnprintfBtf)
	return err == nil || !errors.Is(err, ebpf.ErrNotSupported)
}

// TracepointStackLimit is, where the kernel walks a stack taken at a
// tracepoint (perf, raw or BTF) no further than its first frame, the line
// that says so; "" elsewhere. That is 32-bit ARM: perf_arch_fetch_caller_regs
// fills the caller's pc with the current sp and no lr, and its unwinder
// (CONFIG_UNWINDER_ARM) stops after that frame. A kprobe's stack, from
// real registers, is whole there.
func TracepointStackLimit() string {
	if runtime.GOARCH != "arm" {
		return ""
	}
	return "32-bit ARM's kernel walks a stack taken at a tracepoint no further than its first frame (a kprobe's is whole)"
}
