package tools

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/tracekit/tracekit/terminal"
)

// ReadLog2Array reads a per-CPU array of log2 slots (u32 slot -> u64 count)
// and sums the CPUs.
func ReadLog2Array(m *ebpf.Map) (terminal.Log2Hist, error) {
	var h terminal.Log2Hist
	var perCPU []uint64
	for k := uint32(0); k < terminal.Log2Slots && k < m.MaxEntries(); k++ {
		if err := m.Lookup(k, &perCPU); err != nil {
			return h, fmt.Errorf("read histogram slot %d: %w", k, err)
		}
		for _, v := range perCPU {
			h.Counts[k] += v
		}
	}
	return h, nil
}

// ReadLog2Hash reads a hash of {u32 id; u32 slot} -> u64 count into one
// histogram per id (a pid, a device).
func ReadLog2Hash(m *ebpf.Map) (map[uint32]*terminal.Log2Hist, error) {
	out := map[uint32]*terminal.Log2Hist{}
	var key [2]uint32
	var val uint64
	it := m.Iterate()
	for it.Next(&key, &val) {
		if key[1] >= terminal.Log2Slots {
			continue
		}
		h := out[key[0]]
		if h == nil {
			h = &terminal.Log2Hist{}
			out[key[0]] = h
		}
		h.Counts[key[1]] += val
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read histograms: %w", err)
	}
	return out, nil
}

// ReadPerCPUCounter sums slot 0 of a per-CPU array of u64 (a lost counter).
func ReadPerCPUCounter(m *ebpf.Map) (uint64, error) {
	var perCPU []uint64
	if err := m.Lookup(uint32(0), &perCPU); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return 0, nil
		}
		return 0, fmt.Errorf("read counter: %w", err)
	}
	var sum uint64
	for _, v := range perCPU {
		sum += v
	}
	return sum, nil
}

// Deltas turns the ever-growing counts of the kernel's maps into the
// counts of one interval. The maps are never cleared from user space: a
// clear would race with the CPUs counting and lose their increments.
type Deltas struct {
	Cumulative bool
	prev       map[uint32]terminal.Log2Hist
	prevLost   uint64
}

// Hist returns cur minus what was reported for id last time (all of cur
// when cumulative), and remembers cur.
func (d *Deltas) Hist(id uint32, cur *terminal.Log2Hist) *terminal.Log2Hist {
	if d.prev == nil {
		d.prev = map[uint32]terminal.Log2Hist{}
	}
	out := *cur
	if !d.Cumulative {
		p := d.prev[id]
		for k := range out.Counts {
			out.Counts[k] -= p.Counts[k]
		}
	}
	d.prev[id] = *cur
	return &out
}

// Lost returns the lost events since the last report (all when cumulative).
func (d *Deltas) Lost(cur uint64) uint64 {
	out := cur
	if !d.Cumulative {
		out -= d.prevLost
	}
	d.prevLost = cur
	return out
}

// KeyedDeltas is Deltas for counters keyed by anything: the counts since
// the last report of each key (all of them when cumulative).
type KeyedDeltas[K comparable] struct {
	Cumulative bool
	prev       map[K]uint64
}

// Step returns the non-zero counts of cur since the last call, and
// remembers cur.
func (d *KeyedDeltas[K]) Step(cur map[K]uint64) map[K]uint64 {
	out := make(map[K]uint64, len(cur))
	for k, v := range cur {
		if !d.Cumulative {
			v -= d.prev[k]
		}
		if v != 0 {
			out[k] = v
		}
	}
	d.prev = cur
	return out
}
