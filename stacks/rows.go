package stacks

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/tracekit/tracekit/unwind"
)

// rowChunks is the row table: blocks of unwind.BlockRows rows, numbered
// from 0 across chunks of spec.MaxEntries blocks each, which it makes
// (kernel memory) only as rows are stored, and puts in the array of maps
// the unwinder looks them up through (prog.Config.RowChunk).
type rowChunks struct {
	outer  *ebpf.Map
	spec   *ebpf.MapSpec
	chunks []*ebpf.Map
	// read holds the blocks block read (a block, once stored, never
	// changes): the samples unwound in user space read the same few
	// blocks of libc and their programs frame after frame, a map lookup
	// each without it. Emptied when it holds readBlocks of them.
	read map[int]*[unwind.BlockRows]unwind.Entry
}

// readBlocks bounds rowChunks.read: 256 blocks, 128 KiB.
const readBlocks = 256

func newRowChunks(outer *ebpf.Map, spec *ebpf.MapSpec) *rowChunks {
	return &rowChunks{outer: outer, spec: spec}
}

func (t *rowChunks) per() int { return int(t.spec.MaxEntries) }

// chunk is the chunk of block b, made if it is not yet.
func (t *rowChunks) chunk(b int) (*ebpf.Map, error) {
	for len(t.chunks) <= b/t.per() {
		m, err := ebpf.NewMap(t.spec)
		if err != nil {
			return nil, fmt.Errorf("make a chunk of the row table: %w", err)
		}
		if err := t.outer.Put(uint32(len(t.chunks)), m); err != nil {
			m.Close()
			return nil, fmt.Errorf("add a chunk to the row table: %w", err)
		}
		t.chunks = append(t.chunks, m)
	}
	return t.chunks[b/t.per()], nil
}

// put writes blocks at block first on, in batches (5.6+) or one by one,
// within each chunk.
func (t *rowChunks) put(first int, blocks [][unwind.BlockRows]unwind.Entry) error {
	keys := make([]uint32, 0, storeBatch)
	for len(blocks) > 0 {
		m, err := t.chunk(first)
		if err != nil {
			return err
		}
		n := min(len(blocks), storeBatch, t.per()-first%t.per())
		keys = keys[:0]
		for j := range n {
			keys = append(keys, uint32((first+j)%t.per()))
		}
		if _, err := m.BatchUpdate(keys, blocks[:n], nil); err != nil {
			if !errors.Is(err, ebpf.ErrNotSupported) {
				return err
			}
			for k := range keys {
				if err := m.Put(keys[k], blocks[k]); err != nil {
					return err
				}
			}
		}
		first, blocks = first+n, blocks[n:]
	}
	return nil
}

// block reads block b (made already).
func (t *rowChunks) block(b int, to *[unwind.BlockRows]unwind.Entry) error {
	if r := t.read[b]; r != nil {
		*to = *r
		return nil
	}
	if b/t.per() >= len(t.chunks) {
		return fmt.Errorf("block %d: no chunk of the row table holds it", b)
	}
	if err := t.chunks[b/t.per()].Lookup(uint32(b%t.per()), to); err != nil {
		return err
	}
	if len(t.read) >= readBlocks || t.read == nil {
		t.read = make(map[int]*[unwind.BlockRows]unwind.Entry, readBlocks)
	}
	r := *to
	t.read[b] = &r
	return nil
}

func (t *rowChunks) close() {
	for _, m := range t.chunks {
		m.Close()
	}
	t.chunks, t.read = nil, nil
}

// storeRows appends a file's rows to the table, from a block's start, its
// last block padded.
func (ps *processes) storeRows(f *file, table *unwind.Table) error {
	padded := table.Blocks() * unwind.BlockRows
	if ps.next+padded > ps.capacity {
		ps.full++
		return fmt.Errorf("the row table is full (%d of %d rows used)", ps.next, ps.capacity)
	}
	if err := ps.store(table); err != nil {
		return fmt.Errorf("load unwind rows: %w", err)
	}
	f.first, f.rows = ps.next, table.Len()
	ps.next += padded
	return nil
}

// storeBatch is how many blocks store writes in one call.
const storeBatch = 512

// store writes whole blocks of rows at ps.next, storeBatch blocks a call
// (5.6+) or one at a time, then the fences value whole. (Not through a
// mapping of the table into memory: every page of a mapped BPF array is
// resident, the whole table counted in the tool's RSS.)
func (ps *processes) store(table *unwind.Table) error {
	block := ps.next / unwind.BlockRows
	blocks := table.Blocks()
	values := make([][unwind.BlockRows]unwind.Entry, 0, min(blocks, storeBatch))
	for i := 0; i < blocks; i += storeBatch {
		values = values[:0]
		for j := i; j < min(i+storeBatch, blocks); j++ {
			values = append(values, table.Block(j))
			ps.fenceCopy[block+j] = values[len(values)-1][0].PC
		}
		if err := ps.rows.put(block+i, values); err != nil {
			return err
		}
	}
	return ps.fences.Put(uint32(0), ps.fenceCopy)
}

// tableStats says what the row table holds: the files' rows, and the
// table's rows in use (theirs, and the padding of their last blocks).
func (ps *processes) tableStats() (files, rows, used int) {
	for _, f := range ps.files {
		if f != nil && f.first >= 0 {
			files++
			rows += f.rows
		}
	}
	return files, rows, ps.next
}
