// Package stacks is the stack pipeline that belongs to no tool: it loads
// the sampler (stacks/prog) at a CPU clock, at sched_switch or at a
// tool's event, tracks the processes it meets (their mappings, the
// files' unwind tables in the kernel's row table, their exits), unwinds
// in user space the samples the kernel deferred, drains the counts and
// names the frames, and reports them (text, folded, JSON, SVG, pprof).
// profile is its command line; filter counts and prints events by their
// stacks through CountEvent.
package stacks

import (
	"github.com/tracekit/tracekit/run"
)

// Options is what a run samples and how it reports: profile's command
// line, parsed and checked, or filter's event (CountEvent).
type Options struct {
	run.Common
	run.TreeOption
	Frequency int    // samples per second on each CPU
	Pid       int64  // sample only this process (0: every process, or -c's tree)
	Unwind    string // prog.UnwindAuto, UnwindEH or UnwindFP (ArchUnwind holds it to the architecture)
	Folded    bool   // one line per stack, 'comm;root;...;leaf count'
	SVG       string // also write a flame graph of the whole run here
	SVGLabels []LabelValue
	Pprof     string // also write the whole run here as a gzipped pprof profile
	Budget    int    // the row table's kernel memory, in MiB (DefaultBudget, at most MaxBudget)
	NoParams  bool   // C++ and Rust names without their parameters
	Idle      bool   // count the idle task's samples too
	// UserOnly and KernelOnly report one part of each stack, the stacks
	// that differ only in the other merged (BCC's profile -U and -K).
	UserOnly, KernelOnly bool
	Labels               []LabelSpec
	NoContext            bool   // do not read the context processes publish
	OffCPU               bool   // stacks at sched_switch, weighted by the time off the CPU
	MinBlock             uint64 // with OffCPU: the shortest wait counted, in microseconds
	MaxBlock             uint64 // with OffCPU: the longest, 0 for no bound
	Missing              string // a kernel feature to do without (task_pt_regs)
	// CPUs: sample these CPUs only (nil: every online one); Tid: this
	// thread only, wherever it runs (0: every thread). BCC's -C and -L.
	CPUs []int
	Tid  int
	// Event, when set, is what the sampler runs at instead of the CPU
	// clock: filter's event and its gate.
	Event  *StackEvent
	fpOnly bool // auto is frame pointers on this architecture (ArchUnwind)
}

// assumeMissing says whether the run works as without feature.
func (o *Options) assumeMissing(feature string) bool {
	return o.Missing == feature
}
