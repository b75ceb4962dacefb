package stacks

import (
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"time"

	"github.com/tracekit/tracekit/counts"
	"github.com/tracekit/tracekit/kernel"
	"github.com/tracekit/tracekit/loader"
	"github.com/tracekit/tracekit/procfs"
)

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

// nameAndReport names the kernel addresses of the final report and of
// the whole run's counts (for the files), and prints the report.
func (r *reporter) nameAndReport(counted *held) error {
	tables := []*held{counted}
	if r.whole != nil {
		tables = append(tables, r.whole)
	}
	todo := r.kernelTodo(tables...)
	names, hidden, err := lookupKernel(context.Background(), todo)
	r.printing = nil
	if err != nil {
		return err
	}
	r.learnKernel(todo, names, hidden)
	return r.report(time.Now(), true, counted)
}

// kernelTodo is the kernel addresses of tables not named yet: the run
// itself keeps no kernel symbols, they are named at report time.
func (r *reporter) kernelTodo(tables ...*held) []uint64 {
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
	return todo
}

// lookupKernel names kernel addresses by the kernel's own lookup
// (kernel.SymbolNames, 5.13+), else in one pass over kallsyms (which ctx
// may end); hidden says kallsyms hides the addresses.
func lookupKernel(ctx context.Context, todo []uint64) (names map[uint64]string, hidden bool, err error) {
	if len(todo) == 0 {
		return nil, false, nil
	}
	if names, err = kernel.SymbolNames(todo); err == nil {
		return names, false, nil
	}
	return procfs.KernelFunctions(ctx, todo)
}

// learnKernel keeps the names lookupKernel found ("" for an address it
// could not name), and says once when the kernel hides them.
func (r *reporter) learnKernel(todo []uint64, names map[uint64]string, hidden bool) {
	if hidden && !r.warned {
		r.warned = true
		fmt.Fprintf(r.s.Stderr, "%s: kernel addresses are hidden (kptr_restrict, or not root): kernel frames print as [unknown]\n", r.o.tool())
	}
	for _, pc := range todo {
		r.kernel[pc] = names[pc]
	}
}
