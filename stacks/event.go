package stacks

import (
	"github.com/cilium/ebpf"

	"github.com/tracekit/tracekit/perfevent"
	"github.com/tracekit/tracekit/stacks/prog"
)

// StackEvent is an event whose passing occurrences are counted by their
// user stacks (filter's --count-by ustack) or printed with them
// (--fields ustack) by the pipeline's sampler: its gate and record
// (prog.Event), how it attaches, and what the reports call it.
type StackEvent struct {
	prog.Event
	Name   string // the event as the user wrote it
	Kernel bool   // the kernel stack is part of the key too (kstack)
	// All: with -c, every process's events, not only the command's tree.
	All    bool
	Attach func(*ebpf.Program) error
	// Maps are the host's maps the gate refers to by name (bpftrace's,
	// read and written by the probe's statements before the stacks').
	Maps map[string]*ebpf.Map
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
