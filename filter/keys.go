package filter

import (
	"bytes"
	"sort"
	"sync"
	"time"

	"github.com/cilium/ebpf"

	"github.com/tracekit/tracekit/counts"
	"github.com/tracekit/tracekit/filter/compile"
	"github.com/tracekit/tracekit/loader"
	"github.com/tracekit/tracekit/run"
)

// drainEvery is how often a swapped --count-by moves the kernel's counts
// to user space between reports and scrapes: the kernel's hash then holds
// the keys of about a second, whatever the interval.
const drainEvery = time.Second

// keyTable is --count-by's table when the counts are swapped (a report per
// interval that clears, or --serve): the program counts in one of two
// hashes while the other is drained here, so the kernel never keeps a key
// past its report. A drain is exact: the program reads which hash to count
// in once per event; the drain flips it, waits for the programs running to
// end (loader.Quiescer), and only then reads and empties the other hash,
// which nothing writes any more. Reports and scrapes each take their share
// of what was drained, bounded: a report holds --max-keys keys (the
// events of any other key are counted as lost), a scrape the keys with
// series of their own and "other".
type keyTable struct {
	mu      sync.Mutex
	swap    *loader.Swapped
	cols    []compile.Column
	max     int
	kernel  counts.Deltas // the program's lost count (a full hash), per report
	lostMap *ebpf.Map

	report     map[string]*keyCount // since the last report (--cumulative: the start)
	cumulative bool
	overflow   uint64 // events of keys that did not fit report

	serve *serveTotals // nil without --serve
}

// serveTotals are --serve's counters, cumulative since the start: the keys
// with series of their own (run.StickySeries) and the sum of the others.
type serveTotals struct {
	series run.StickySeries[string]
	own    map[string]*keyCount
	other  uint64
}

// newKeyTable makes the table of a swapped program's maps in coll; with
// serveTop > 0 it keeps --serve's series too. Close frees what it made.
func newKeyTable(coll *ebpf.Collection, prog *compile.Program, serveTop int, cumulative bool) (*keyTable, error) {
	swap, err := loader.NewSwapped(coll.Maps["counts"], coll.Maps[compile.CountsSwap], coll.Maps[compile.GenMap])
	if err != nil {
		return nil, err
	}
	t := &keyTable{
		swap: swap, cols: prog.Columns, max: int(prog.MaxKeys), lostMap: coll.Maps["lost"],
		report: map[string]*keyCount{}, cumulative: cumulative,
	}
	if serveTop > 0 {
		t.serve = &serveTotals{series: run.StickySeries[string]{Max: serveTop}, own: map[string]*keyCount{}}
	}
	return t, nil
}

// Close frees the Quiescer's maps.
func (t *keyTable) Close() error { return t.swap.Close() }

// drain moves the counts of the hash the program counts in to the table.
func (t *keyTable) drain() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.drainLocked()
}

func (t *keyTable) drainLocked() error {
	var keys [][]byte
	var counts []uint64
	if err := loader.Drain(t.swap, func(k []byte, n uint64) {
		keys, counts = append(keys, bytes.Clone(k)), append(counts, n)
	}); err != nil {
		return err
	}
	rows := decodeRows(keys, counts, t.cols)
	for _, r := range rows {
		k := rowKey(r)
		if have, ok := t.report[k]; ok {
			have.count += r.count
		} else if len(t.report) < t.max {
			row := r
			t.report[k] = &row
		} else {
			t.overflow += r.count
		}
	}
	if t.serve != nil {
		t.serve.add(rows)
	}
	return nil
}

// take drains, and returns the report's rows (largest first) and its lost
// events: the program's (a full hash) and the table's (--max-keys keys
// held already). Unless cumulative, the report starts again empty.
func (t *keyTable) take() ([]keyCount, uint64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.drainLocked(); err != nil {
		return nil, 0, err
	}
	kernelLost, err := counts.ReadPerCPUCounter(t.lostMap)
	if err != nil {
		return nil, 0, err
	}
	lost := t.kernel.Counter(kernelLost)
	rows := make([]keyCount, 0, len(t.report))
	for _, r := range t.report {
		rows = append(rows, *r)
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].count != rows[j].count {
			return rows[i].count > rows[j].count
		}
		return rowKey(rows[i]) < rowKey(rows[j])
	})
	if t.cumulative {
		lost = kernelLost + t.overflow
	} else {
		lost += t.overflow
		t.report, t.overflow = map[string]*keyCount{}, 0
	}
	return rows, lost, nil
}

// add counts a drain's rows into the series: a key's own, or "other".
func (st *serveTotals) add(rows []keyCount) {
	byKey := make(map[string]uint64, len(rows))
	for _, r := range rows {
		byKey[rowKey(r)] = r.count
	}
	own := st.series.Assign(byKey, func(a, b string) bool { return a < b })
	for _, r := range rows {
		k := rowKey(r)
		if !own[k] {
			st.other += r.count
			continue
		}
		if have, ok := st.own[k]; ok {
			have.count += r.count
		} else {
			row := r
			st.own[k] = &row
		}
	}
}

// scrape drains, and returns --serve's rows (sorted by key), the sum of
// the other keys, and the program's lost count since the start.
func (t *keyTable) scrape() (rows []keyCount, other, lost uint64, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.drainLocked(); err != nil {
		return nil, 0, 0, err
	}
	if lost, err = counts.ReadPerCPUCounter(t.lostMap); err != nil {
		return nil, 0, 0, err
	}
	keys := make([]string, 0, len(t.serve.own))
	for k := range t.serve.own {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		rows = append(rows, *t.serve.own[k])
	}
	return rows, t.serve.other, lost, nil
}

// readRaw reads a whole counts hash: the rows its keys decode to (see
// readCounts).
func readRaw(m *ebpf.Map, cols []compile.Column) ([]keyCount, error) {
	var keys [][]byte
	var counts []uint64
	if err := loader.Each(m, func(k []byte, n uint64) {
		keys, counts = append(keys, k), append(counts, n)
	}); err != nil {
		return nil, err
	}
	return decodeRows(keys, counts, cols), nil
}
