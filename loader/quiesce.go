package loader

import (
	"errors"
	"fmt"
	"reflect"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
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

// Swapped is a pair of maps a program counts in one at a time, as the u32
// in Gen's first value says (asm.SwappedHashIncrement), so that user space
// can drain one while the other counts; or several pairs the one value
// switches together (Also).
type Swapped struct {
	pairs [][2]*ebpf.Map
	gen   *ebpf.Map
	cur   uint32
	wait  *Quiescer
	// Drain's batches: keys (a slice of arrays of each pair's key size),
	// counts; noBatch once the kernel said no.
	batch   []reflect.Value
	counts  []uint64
	noBatch bool
}

// NewSwapped makes the pair of a and b (the program counts in a first).
func NewSwapped(a, b, gen *ebpf.Map) (*Swapped, error) {
	q, err := NewQuiescer()
	if err != nil {
		return nil, err
	}
	s := &Swapped{gen: gen, wait: q}
	s.Also(a, b)
	return s, nil
}

// Also adds the pair of a and b, which the programs count in as they do in
// the first pair (a when it is its a).
func (s *Swapped) Also(a, b *ebpf.Map) {
	s.pairs = append(s.pairs, [2]*ebpf.Map{a, b})
	s.batch = append(s.batch, reflect.Value{})
}

// Flip makes the program count in the other map of each pair, waits for
// the programs running to end, and returns the maps it counted in (one a
// pair), which nothing writes any more: read them, then empty them.
func (s *Swapped) Flip() ([]*ebpf.Map, error) {
	var old []*ebpf.Map
	for _, p := range s.pairs {
		old = append(old, p[s.cur])
	}
	if err := s.gen.Put(uint32(0), s.cur^1); err != nil {
		return nil, fmt.Errorf("swap the counts: %w", err)
	}
	s.cur ^= 1
	if err := s.wait.Wait(); err != nil {
		return nil, err
	}
	return old, nil
}

// Current is the map of the first pair the program counts in now.
func (s *Swapped) Current() *ebpf.Map { return s.pairs[0][s.cur] }

// Currents are the maps the program counts in now, one a pair.
func (s *Swapped) Currents() []*ebpf.Map {
	var out []*ebpf.Map
	for _, p := range s.pairs {
		out = append(out, p[s.cur])
	}
	return out
}

// Close frees the Quiescer's maps.
func (s *Swapped) Close() error { return s.wait.Close() }

// Drain flips s (see Flip), hands every key and count of the maps the
// programs counted in until then to each, and empties those maps: a batch
// of drainBatch keys a call (BPF_MAP_LOOKUP_AND_DELETE_BATCH, 5.6+), else
// a lookup and a delete a key. A key is valid until each returns.
func Drain(s *Swapped, each func(key []byte, count uint64)) error {
	maps, err := s.Flip()
	if err != nil {
		return err
	}
	for i, m := range maps {
		if err := s.drain(i, m, each); err != nil {
			return err
		}
	}
	return nil
}

// drain empties m, the pair i's map Flip returned, into each.
func (s *Swapped) drain(i int, m *ebpf.Map, each func(key []byte, count uint64)) error {
	if !s.noBatch {
		err := s.drainBatches(i, m, each)
		if err == nil {
			return nil
		}
		if !errors.Is(err, ebpf.ErrNotSupported) && !errors.Is(err, unix.ENOSPC) {
			return fmt.Errorf("drain the counts: %w", err)
		}
		// No batches here (before 5.6), or a bucket of more keys than a
		// batch: what is left, a key at a time, as from now on.
		s.noBatch = true
	}
	var keys [][]byte
	if err := Each(m, func(k []byte, n uint64) {
		keys = append(keys, k)
		each(k, n)
	}); err != nil {
		return err
	}
	return empty(m, keys)
}

// drainBatch is how many keys Drain reads and deletes a call: 650 KiB of
// profile's deepest stack keys.
const drainBatch = 256

// drainBatches reads and deletes m's keys drainBatch at a time.
func (s *Swapped) drainBatches(i int, m *ebpf.Map, each func(key []byte, count uint64)) error {
	if !s.batch[i].IsValid() {
		// Keys of the map's size: a slice of byte arrays, as the batch
		// call wants a slice of keys.
		s.batch[i] = reflect.MakeSlice(reflect.SliceOf(reflect.ArrayOf(int(m.KeySize()), reflect.TypeFor[byte]())), drainBatch, drainBatch)
	}
	if s.counts == nil {
		s.counts = make([]uint64, drainBatch)
	}
	batch := s.batch[i]
	var cursor ebpf.MapBatchCursor
	for {
		n, err := m.BatchLookupAndDelete(&cursor, batch.Interface(), s.counts, nil)
		for j := range n {
			each(batch.Index(j).Bytes(), s.counts[j])
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil // the end
		}
		if err != nil {
			return err
		}
	}
}

// Each hands every key and u64 value of m to each, as Drain does (each
// key its own here), without emptying it: the map the programs count in
// (Swapped.Current) at the end of a run, or a map no program swaps.
func Each(m *ebpf.Map, each func(key []byte, value uint64)) error {
	var k []byte // cilium/ebpf gives a new one each time
	var v uint64
	it := m.Iterate()
	for it.Next(&k, &v) {
		each(k, v)
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read the counts: %w", err)
	}
	return nil
}

// empty deletes the keys read from a map Flip returned.
func empty(m *ebpf.Map, keys [][]byte) error {
	var errs []error
	for _, k := range keys {
		if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("empty the drained counts: %w", err)
	}
	return nil
}

// Misses is how many times the kernel skipped prog instead of running it
// (bpf_prog_info.recursion_misses, 5.12+; 0 before, or when it cannot be
// read). Where programs run with preemption on (fentry and raw
// tracepoints under a preemptible kernel's RCU: the 7.x kernels), a
// program preempted mid-run makes the next task on that CPU skip it: an
// event not counted, which a tool must count as lost.
func Misses(prog *ebpf.Program) uint64 {
	if prog == nil {
		return 0
	}
	st, err := prog.Stats()
	if err != nil {
		return 0
	}
	return st.RecursionMisses
}
