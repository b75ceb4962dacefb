package writesize

import (
	"github.com/tracekit/tracekit/counts"
	"github.com/tracekit/tracekit/loader"
	"github.com/tracekit/tracekit/metrics"
	"github.com/tracekit/tracekit/run"
)

// The buckets: slots up to 2^31-1 bytes, the most one write(2) moves.
const lastSlot = 31

// maxCommSeries bounds the task names with series of their own (-P).
const maxCommSeries = 200

// collector turns the histogram into tracekit_writesize_bytes at each
// scrape, cumulative since the start (without -P: procTable serves -P's).
type collector struct {
	r *reader
}

func (c *collector) families() []metrics.Family {
	sizes := metrics.Family{Name: "tracekit_writesize_bytes", Help: "Sizes of write(2) calls since writesize started, in bytes (the count argument).", Type: metrics.Histogram}
	h, err := counts.ReadLog2Array(c.r.coll.Maps["hist"])
	if err == nil {
		sizes.Metrics = []metrics.Metric{{Hist: run.Log2Hist(h.Counts[:], lastSlot, 1, false)}}
	}
	return []metrics.Family{sizes, run.LostFamily("writesize", loader.Misses(c.r.prog))}
}
