package run

import (
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/tracekit/tracekit/loader"
)

// SkippedWhy names the cause of lost events that are the kernel's skipped
// runs of a program (loader.Misses).
const SkippedWhy = "the kernel skipped the program, preempted mid-run"

// ReportSkips says at the end of the run how many times the kernel
// skipped progs (loader.Misses, summed), where a skipped run is not always one of
// the events the tool counts (a filter in the program, a tracepoint that
// fires for more than the tool measures), so that no count can hold them:
// what says what they may have cost, such as "drops of other protocols are
// among them". Where each run is one event, add the misses to the lost
// count instead.
func (s *Session) ReportSkips(what string, progs ...*ebpf.Program) {
	s.OnClose("", func() error {
		var n uint64
		for _, p := range progs {
			n += loader.Misses(p)
		}
		if n > 0 {
			fmt.Fprintf(s.Stderr, "%s: the kernel skipped its programs %d times (preempted mid-run on a CPU that the next event then reached): %s\n", s.Tool, n, what)
		}
		return nil
	})
}
