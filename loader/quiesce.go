package loader

import (
	"fmt"

	"github.com/cilium/ebpf"
)

// Quiescer waits for the BPF programs running on any CPU to end, so that
// user space knows none still acts on what it saw before: a program that
// read a flag before it changed. It is the kernel's own guarantee for
// map-in-map updates (kernel/bpf/syscall.c, maybe_wait_bpf_programs, 4.20+):
// an update of an array of maps returns after an RCU grace period, and
// every non-sleepable tracing program runs inside an RCU read-side
// section. Waiting this way needs no capability once the maps exist.
type Quiescer struct {
	outer, inner *ebpf.Map
}

// NewQuiescer makes the two tiny maps a Quiescer updates.
func NewQuiescer() (*Quiescer, error) {
	spec := &ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1}
	inner, err := ebpf.NewMap(spec)
	if err != nil {
		return nil, fmt.Errorf("create the map that waits for programs: %w", err)
	}
	outer, err := ebpf.NewMap(&ebpf.MapSpec{Name: "quiesce", Type: ebpf.ArrayOfMaps, KeySize: 4, ValueSize: 4, MaxEntries: 1, InnerMap: spec})
	if err != nil {
		inner.Close()
		return nil, fmt.Errorf("create the map that waits for programs: %w", err)
	}
	return &Quiescer{outer: outer, inner: inner}, nil
}

// Wait returns once every program that was running when it was called has
// ended (a grace period: milliseconds).
func (q *Quiescer) Wait() error {
	if err := q.outer.Put(uint32(0), q.inner); err != nil {
		return fmt.Errorf("wait for the programs running: %w", err)
	}
	return nil
}

// Close frees the maps.
func (q *Quiescer) Close() error {
	q.outer.Close()
	q.inner.Close()
	return nil
}
