package stacks

import (
	"encoding/binary"
	"math/bits"
	"slices"
	"unsafe"

	"github.com/cilium/ebpf"

	"github.com/tracekit/tracekit/stacks/prog"
)

// lpmKey and lpmValue are the mappings trie's: {pid, address} big-endian,
// the longest prefix wins.
type lpmKey struct {
	Prefixlen uint32
	Pid       [4]byte
	Addr      [8]byte
}

// lpmValue is the trie's value as the unwinder reads it (prog.MappingSize
// bytes: the index below is out of range otherwise).
var _ = [1]struct{}{}[unsafe.Sizeof(lpmValue{})-prog.MappingSize]

type lpmValue struct {
	First, Count uint32
	Bias         uint64
	// Start and End are the mapping's (every prefix of it has them): the
	// unwinder caches the last frame's and looks up no other frame in it.
	Start, End uint64
}

// bpfMap is what process tracking does to its BPF maps (the mappings
// trie, the fences, the labels' places): an *ebpf.Map in a run, a map in
// memory in the tests of its logic, which then need no root.
type bpfMap interface {
	Put(key, value any) error
	Delete(key any) error
	Lookup(key, valueOut any) error
}

// mapOrNil is m as a bpfMap: nil when m is (an interface holding a nil
// pointer is not nil).
func mapOrNil(m *ebpf.Map) bpfMap {
	if m == nil {
		return nil
	}
	return m
}

// point replaces the process's prefixes in the mappings trie with those of
// its mappings whose files have rows: the new ones first (a key already
// there is replaced in place), then the stale ones deleted, so that the
// unwinder never misses a mapping that stays. A span put whole before,
// with the same value, is there still: it is not put again (a process's
// rescan after its loader mapped its libraries, a file's table read: each
// a few updates, not one a prefix of every mapping).
func (ps *processes) point(pid uint32, p *process) {
	var keep []lpmKey
	var spans []lpmValue
	kept := map[lpmKey]bool{}
	add := func(start, end uint64, v lpmValue) {
		if deferAll {
			return
		}
		v.Start, v.End = start, end
		there := slices.Contains(p.spans, v)
		whole := true
		for _, k := range prefixes(pid, start, end) {
			if there || ps.lpm.Put(k, v) == nil {
				keep = append(keep, k)
				kept[k] = true
			} else {
				whole = false
			}
		}
		if whole {
			spans = append(spans, v)
		}
	}
	for _, m := range p.maps {
		f := m.file
		switch {
		case f.first >= 0 && m.End-m.bias <= 1<<32 && m.Start >= m.bias:
			add(m.Start, m.End, lpmValue{First: uint32(f.first), Count: uint32(f.rows), Bias: m.bias})
		case f.settled() || f.held:
			// Known to have no table (or none the unwinder can use: past
			// 4 GiB), or held (see deferredIn): no rows (Count 0), so
			// that the unwinder does not defer its samples to user space.
			add(m.Start, m.End, lpmValue{})
		}
		// Else not read yet: its samples are deferred until it is.
	}
	for _, m := range p.anon {
		add(m.Start, m.End, lpmValue{}) // JIT code: no rows
	}
	for _, k := range p.prefixes {
		if !kept[k] {
			_ = ps.lpm.Delete(k)
		}
	}
	p.prefixes, p.spans = keep, spans
}

// prefixes covers [start, end) of a process with aligned power-of-two
// blocks, each a trie prefix of 32 (pid) + 64-k (address) bits.
func prefixes(pid uint32, start, end uint64) []lpmKey {
	var out []lpmKey
	for start < end {
		k := bits.TrailingZeros64(start)
		if start == 0 {
			k = 64
		}
		for k > 0 && (k >= 64 || end-start < 1<<k) {
			k--
		}
		var key lpmKey
		key.Prefixlen = uint32(32 + 64 - k)
		binary.BigEndian.PutUint32(key.Pid[:], pid)
		binary.BigEndian.PutUint64(key.Addr[:], start)
		out = append(out, key)
		start += 1 << k
	}
	return out
}
