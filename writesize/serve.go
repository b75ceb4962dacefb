package writesize

import (
	"github.com/tracekit/tracekit/counts"
	"github.com/tracekit/tracekit/metrics"
	"github.com/tracekit/tracekit/run"
)

// The buckets: slots up to 2^31-1 bytes, the most one write(2) moves.
const lastSlot = 31

// maxCommSeries bounds the task names with series of their own (-P).
const maxCommSeries = 200

// collector turns the counts into tracekit_writesize_bytes at each scrape:
// cumulative since the start, by task name with -P (the processes of a
// name summed). It has a reader of its own: the reports keep their deltas.
type collector struct {
	r      *reader
	series run.StickySeries[string]
	names  map[uint32]string // a pid's name when first seen: its counts never change series
}

func (c *collector) families() []metrics.Family {
	sizes := metrics.Family{Name: "tracekit_writesize_bytes", Help: "Sizes of write(2) calls since writesize started, in bytes (the count argument).", Type: metrics.Histogram}
	var lost uint64
	if !c.r.perProcess {
		h, err := counts.ReadLog2Array(c.r.coll.Maps["hist"])
		if err == nil {
			sizes.Metrics = []metrics.Metric{{Hist: run.Log2Hist(h.Counts[:], lastSlot, 1, false)}}
		}
		return []metrics.Family{sizes, run.LostFamily("writesize", 0)}
	}
	lost, _ = counts.ReadPerCPUCounter(c.r.coll.Maps["lost"])
	hists, err := counts.ReadLog2Hash(c.r.coll.Maps["hist"])
	if err != nil {
		return []metrics.Family{sizes, run.LostFamily("writesize", lost)}
	}
	byComm := map[string][]uint64{}
	totals := map[string]uint64{}
	for pid, h := range hists {
		comm, ok := c.names[pid]
		if !ok {
			comm = c.r.comm(pid)
			if pid == 0 && c.r.inNS {
				comm = "[outside this pid namespace]"
			}
			if c.names == nil {
				c.names = map[uint32]string{}
			}
			c.names[pid] = comm
		}
		sum := byComm[comm]
		if sum == nil {
			sum = make([]uint64, len(h.Counts))
			byComm[comm] = sum
		}
		for i, n := range h.Counts {
			sum[i] += n
			totals[comm] += n
		}
	}
	own := c.series.Assign(totals, func(a, b string) bool { return a < b })
	merged := map[string][]uint64{}
	for comm, counts := range byComm {
		label := comm
		if !own[comm] {
			label = "other"
		}
		m := merged[label]
		if m == nil {
			m = make([]uint64, len(counts))
			merged[label] = m
		}
		for i, n := range counts {
			m[i] += n
		}
	}
	for comm, counts := range merged {
		sizes.Metrics = append(sizes.Metrics, metrics.Metric{Labels: []metrics.Label{{Name: "comm", Value: comm}}, Hist: run.Log2Hist(counts, lastSlot, 1, false)})
	}
	return []metrics.Family{sizes, run.LostFamily("writesize", lost)}
}
