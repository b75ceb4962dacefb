package counts

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/tracekit/tracekit/internal/slots"
	"github.com/tracekit/tracekit/terminal"
)

// ReadSlotArray reads a per-CPU array of u64 slot counts and sums the CPUs.
func ReadSlotArray(m *ebpf.Map) ([]uint64, error) {
	out := make([]uint64, m.MaxEntries())
	var perCPU []uint64
	for k := range out {
		if err := m.Lookup(uint32(k), &perCPU); err != nil {
			return nil, fmt.Errorf("read slot %d: %w", k, err)
		}
		for _, v := range perCPU {
			out[k] += v
		}
	}
	return out, nil
}

// ReadSlotHash reads a hash of {u32 id; u32 slot} -> u64 count into slot
// counts per id (a pid, a device), slots below n.
func ReadSlotHash(m *ebpf.Map, n int) (map[uint32][]uint64, error) {
	out := map[uint32][]uint64{}
	var key [2]uint32
	var val uint64
	it := m.Iterate()
	for it.Next(&key, &val) {
		if int(key[1]) >= n {
			continue
		}
		if out[key[0]] == nil {
			out[key[0]] = make([]uint64, n)
		}
		out[key[0]][key[1]] += val
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read histograms: %w", err)
	}
	return out, nil
}

// ReadLog2Array reads a per-CPU array of log2 slots into a histogram.
func ReadLog2Array(m *ebpf.Map) (terminal.Log2Hist, error) {
	var h terminal.Log2Hist
	slots, err := ReadSlotArray(m)
	copy(h.Counts[:], slots)
	return h, err
}

// ReadLog2Hash reads a hash of {u32 id; u32 slot} -> u64 count into one
// histogram per id.
func ReadLog2Hash(m *ebpf.Map) (map[uint32]*terminal.Log2Hist, error) {
	slots, err := ReadSlotHash(m, slots.Log2)
	if err != nil {
		return nil, err
	}
	out := make(map[uint32]*terminal.Log2Hist, len(slots))
	for id, s := range slots {
		h := &terminal.Log2Hist{}
		copy(h.Counts[:], s)
		out[id] = h
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
	prev       map[uint32][]uint64
	prevCount  uint64
}

// Slots returns cur minus what was reported for id last time (all of cur
// when cumulative), and remembers cur.
func (d *Deltas) Slots(id uint32, cur []uint64) []uint64 {
	if d.prev == nil {
		d.prev = map[uint32][]uint64{}
	}
	out := append([]uint64(nil), cur...)
	if p := d.prev[id]; !d.Cumulative && p != nil {
		for k := range out {
			out[k] -= p[k]
		}
	}
	d.prev[id] = append([]uint64(nil), cur...)
	return out
}

// Hist is Slots for a log2 histogram.
func (d *Deltas) Hist(id uint32, cur *terminal.Log2Hist) *terminal.Log2Hist {
	out := &terminal.Log2Hist{Label: cur.Label}
	copy(out.Counts[:], d.Slots(id, cur.Counts[:]))
	return out
}

// Counter returns what a single ever-growing counter (lost events, a
// filter's count) gained since the last report (all of it when cumulative).
func (d *Deltas) Counter(cur uint64) uint64 {
	out := cur
	if !d.Cumulative {
		out -= d.prevCount
	}
	d.prevCount = cur
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

// DumpHash reads a whole hash map: in batches of 1024 where the kernel has
// BPF_MAP_LOOKUP_BATCH for hashes (5.6+), a few system calls for ten
// thousand keys; else a key at a time.
func DumpHash[K comparable, V any](m *ebpf.Map) (map[K]V, error) {
	out := map[K]V{}
	keys, vals := make([]K, 1024), make([]V, 1024)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := m.BatchLookup(&cursor, keys, vals, nil)
		for i := 0; i < n; i++ {
			out[keys[i]] = vals[i]
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return out, nil
		}
		if err != nil {
			break // not supported (before 5.6), or a bucket larger than a batch
		}
	}
	clear(out)
	var k K
	var v V
	it := m.Iterate()
	for it.Next(&k, &v) {
		out[k] = v
	}
	if err := it.Err(); err != nil {
		return nil, err
	}
	return out, nil
}
