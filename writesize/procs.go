package writesize

import (
	"encoding/binary"
	"fmt"
	"sort"
	"sync"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/tracekit/tracekit/counts"
	"github.com/tracekit/tracekit/internal/slots"
	"github.com/tracekit/tracekit/loader"
	"github.com/tracekit/tracekit/metrics"
	"github.com/tracekit/tracekit/procfs"
	"github.com/tracekit/tracekit/run"
	"github.com/tracekit/tracekit/terminal"
	"github.com/tracekit/tracekit/writesize/prog"
)

// procTable is -P's table: the program counts {pid, slot} in one of two
// hashes while the other is drained here every second (the flip, then
// loader.Quiescer's wait for the programs running, then a read and an
// emptying of the hash nothing writes any more), so the kernel holds a
// second's processes, never the run's. Each process is named when it is
// drained. Reports take what was drained since the last one (all of it
// with --cumulative), at most max processes (the writes of others are
// counted as lost); --serve's series are cumulative by task name.
type procTable struct {
	mu    sync.Mutex
	swap  *loader.Swapped
	comms *ebpf.Map
	inNS  bool
	max   int

	lostMap  *ebpf.Map
	prog     *ebpf.Program // its skipped runs are lost writes (loader.Misses)
	kernel   counts.Deltas // the program's lost count (a full hash), per report
	report   map[uint32]*procHist
	overflow uint64 // writes of processes that did not fit report
	cumul    bool

	serve *procSeries // nil without --serve
}

type procHist struct {
	comm  string
	slots [slots.Log2]uint64
}

// procSeries are --serve's histograms since the start, by task name: the
// names with series of their own, and the others summed.
type procSeries struct {
	series run.StickySeries[string]
	own    map[string]*[slots.Log2]uint64
	other  [slots.Log2]uint64
}

func newProcTable(coll *ebpf.Collection, program *ebpf.Program, max int, inNS, cumulative, serve bool) (*procTable, error) {
	swap, err := loader.NewSwapped(coll.Maps["hist"], coll.Maps[prog.HistSwap], coll.Maps[prog.GenMap])
	if err != nil {
		return nil, err
	}
	t := &procTable{
		swap: swap, prog: program, comms: coll.Maps["comms"], inNS: inNS, max: max, lostMap: coll.Maps["lost"],
		report: map[uint32]*procHist{}, cumul: cumulative,
	}
	if serve {
		t.serve = &procSeries{series: run.StickySeries[string]{Max: maxCommSeries}, own: map[string]*[slots.Log2]uint64{}}
	}
	return t, nil
}

// Close frees the Quiescer's maps.
func (t *procTable) Close() error { return t.swap.Close() }

func (t *procTable) drain() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.drainLocked()
}

func (t *procTable) drainLocked() error {
	drained := map[uint32]*[slots.Log2]uint64{}
	if err := loader.Drain(t.swap, func(key []byte, n uint64) {
		pid, slot := binary.NativeEndian.Uint32(key), binary.NativeEndian.Uint32(key[4:])
		if slot >= slots.Log2 {
			return
		}
		h := drained[pid]
		if h == nil {
			h = &[slots.Log2]uint64{}
			drained[pid] = h
		}
		h[slot] += n
	}); err != nil {
		return fmt.Errorf("histograms: %w", err)
	}
	byComm := map[string]*[slots.Log2]uint64{}
	for pid, h := range drained {
		have, ok := t.report[pid]
		comm := ""
		if ok {
			comm = have.comm
		} else {
			comm = t.name(pid)
			if len(t.report) < t.max {
				have = &procHist{comm: comm}
				t.report[pid] = have
			} else {
				t.overflow += sum(h)
			}
		}
		if have != nil {
			for i, n := range h {
				have.slots[i] += n
			}
		}
		if t.serve != nil {
			if byComm[comm] == nil {
				byComm[comm] = &[slots.Log2]uint64{}
			}
			for i, n := range h {
				byComm[comm][i] += n
			}
		}
	}
	if t.serve != nil {
		t.serve.add(byComm)
	}
	return nil
}

func sum(h *[slots.Log2]uint64) (n uint64) {
	for _, c := range h {
		n += c
	}
	return n
}

// name is the task name the kernel recorded for pid, else /proc's, else
// "?" (the name map was full, and it exited). The name of a process that
// has exited leaves the map: it is the report's now, and the map holds the
// names of the processes that write, not of the run's.
func (t *procTable) name(pid uint32) string {
	if pid == 0 && t.inNS {
		return "[outside this pid namespace]"
	}
	live := procfs.Comm(pid)
	var name [16]byte
	if err := t.comms.Lookup(pid, &name); err == nil {
		if live == "" {
			_ = t.comms.Delete(pid)
		}
		if s := unix.ByteSliceToString(name[:]); s != "" {
			return s
		}
	}
	if live != "" {
		return live
	}
	return "?"
}

// add counts a drain's histograms, by task name, into the series: a
// name's own, or "other".
func (st *procSeries) add(byComm map[string]*[slots.Log2]uint64) {
	totals := make(map[string]uint64, len(byComm))
	for comm, h := range byComm {
		totals[comm] = sum(h)
	}
	own := st.series.Assign(totals, func(a, b string) bool { return a < b })
	for comm, h := range byComm {
		dst := &st.other
		if own[comm] {
			if st.own[comm] == nil {
				st.own[comm] = &[slots.Log2]uint64{}
			}
			dst = st.own[comm]
		}
		for i, n := range h {
			dst[i] += n
		}
	}
}

// take drains, and returns a report: a histogram per process (by pid),
// the lost writes (the program's, a full hash; the kernel's, runs of the
// program it skipped; and the table's, max processes held already), and
// how many processes print as "?". Unless cumulative, the report starts
// again empty.
// lostWhy names the causes of the lost writes in a text report.
func (t *procTable) lostWhy() string {
	why := fmt.Sprintf("more than %d processes in an interval: --max-keys raises it", t.max)
	if t.cumul {
		why = fmt.Sprintf("more than %d processes in the run: --max-keys raises it", t.max)
	}
	if t.prog != nil {
		why += "; or " + run.SkippedWhy
	}
	return why
}

func (t *procTable) take() (*run.HistReport, int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.drainLocked(); err != nil {
		return nil, 0, err
	}
	kernelLost, err := counts.ReadPerCPUCounter(t.lostMap)
	if err != nil {
		return nil, 0, err
	}
	kernelLost += loader.Misses(t.prog)
	rep := &run.HistReport{Unit: "bytes", LabelKind: "process", Lost: t.kernel.Counter(kernelLost) + t.overflow, LostWhy: t.lostWhy()}
	if t.cumul {
		rep.Lost = kernelLost + t.overflow
	}
	pids := make([]uint32, 0, len(t.report))
	for pid := range t.report {
		pids = append(pids, pid)
	}
	sort.Slice(pids, func(i, j int) bool { return pids[i] < pids[j] })
	unnamed := 0
	for _, pid := range pids {
		p := t.report[pid]
		h := &terminal.Log2Hist{}
		copy(h.Counts[:], p.slots[:])
		switch {
		case pid == 0 && t.inNS:
			h.Label = "[outside this pid namespace] -"
		default:
			if p.comm == "?" {
				unnamed++
			}
			h.Label = fmt.Sprintf("%s %d", p.comm, pid)
		}
		rep.Hists = append(rep.Hists, h)
	}
	if !t.cumul {
		t.report, t.overflow = map[uint32]*procHist{}, 0
	}
	return rep, unnamed, nil
}

// families is --serve's exposition: the histograms by task name since the
// start (drained first), and the lost writes.
func (t *procTable) families() []metrics.Family {
	sizes := metrics.Family{Name: "tracekit_writesize_bytes", Help: "Sizes of write(2) calls since writesize started, in bytes (the count argument).", Type: metrics.Histogram}
	t.mu.Lock()
	defer t.mu.Unlock()
	lost, _ := counts.ReadPerCPUCounter(t.lostMap) // a full hash (the report's overflow is served)
	lost += loader.Misses(t.prog)
	if err := t.drainLocked(); err != nil {
		return []metrics.Family{sizes, run.LostFamily("writesize", lost)}
	}
	add := func(label string, h *[slots.Log2]uint64) {
		sizes.Metrics = append(sizes.Metrics, metrics.Metric{Labels: []metrics.Label{{Name: "comm", Value: label}}, Hist: run.Log2Hist(h[:], lastSlot, 1, false)})
	}
	for comm, h := range t.serve.own {
		add(comm, h)
	}
	if sum(&t.serve.other) > 0 {
		add("other", &t.serve.other)
	}
	return []metrics.Family{sizes, run.LostFamily("writesize", lost)}
}
