package loader

import (
	"encoding/binary"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/rlimit"

	"github.com/tracekit/tracekit/internal/privtest"
)

// Drain hands every key of the maps counted in once, with its count, and
// leaves them empty, in batches and a key at a time alike; keys of an odd
// size (13 bytes), more of them than a batch holds, and a second pair
// (Also) of another size (21 bytes) flipped with the first.
func TestDrain(t *testing.T) {
	privtest.Require(t)
	if err := rlimit.RemoveMemlock(); err != nil {
		t.Fatal(err)
	}
	spec := &ebpf.MapSpec{Type: ebpf.Hash, KeySize: 13, ValueSize: 8, MaxEntries: 4096}
	var maps [2]*ebpf.Map
	for i := range maps {
		m, err := ebpf.NewMap(spec)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		maps[i] = m
	}
	gen, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer gen.Close()
	s, err := NewSwapped(maps[0], maps[1], gen)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var deep [2]*ebpf.Map
	for i := range deep {
		m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 21, ValueSize: 8, MaxEntries: 1024})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		deep[i] = m
	}
	s.Also(deep[0], deep[1])
	const n = 3*drainBatch + 7
	const nDeep = drainBatch + 3
	for _, batch := range []bool{true, false} {
		s.noBatch = !batch
		cur := s.Current()
		for i := range n {
			key := make([]byte, 13)
			binary.LittleEndian.PutUint32(key[9:], uint32(i))
			if err := cur.Put(key, uint64(i)*3+1); err != nil {
				t.Fatal(err)
			}
		}
		curDeep := s.Currents()[1]
		for i := range nDeep {
			key := make([]byte, 21)
			binary.LittleEndian.PutUint32(key[17:], uint32(i))
			if err := curDeep.Put(key, uint64(5)); err != nil {
				t.Fatal(err)
			}
		}
		seen := map[uint32]uint64{}
		seenDeep := map[uint32]uint64{}
		if err := Drain(s, func(k []byte, c uint64) {
			if len(k) == 21 {
				seenDeep[binary.LittleEndian.Uint32(k[17:])] += c
				return
			}
			seen[binary.LittleEndian.Uint32(k[9:])] += c
		}); err != nil {
			t.Fatal(err)
		}
		if len(seenDeep) != nDeep {
			t.Errorf("batches %v: %d keys of the second pair drained, want %d", batch, len(seenDeep), nDeep)
		}
		if s.Currents()[1] == curDeep {
			t.Errorf("batches %v: the second pair did not flip", batch)
		}
		if len(seen) != n {
			t.Errorf("batches %v: %d keys drained, want %d", batch, len(seen), n)
		}
		for i, c := range seen {
			if c != uint64(i)*3+1 {
				t.Fatalf("batches %v: key %d counted %d, want %d", batch, i, c, uint64(i)*3+1)
			}
		}
		var k []byte
		var v uint64
		if cur.Iterate().Next(&k, &v) {
			t.Errorf("batches %v: a key left in the drained map", batch)
		}
		if batch && s.noBatch {
			t.Errorf("the batches fell back to a key at a time: every kernel of the matrix (5.10 on) has BPF_MAP_LOOKUP_AND_DELETE_BATCH")
		}
		if s.Current() == cur {
			t.Errorf("batches %v: the programs count in the drained map still", batch)
		}
	}
}
