package filter

import (
	"strconv"

	"github.com/cilium/ebpf"

	"github.com/tracekit/tracekit/counts"
	"github.com/tracekit/tracekit/filter/compile"
	"github.com/tracekit/tracekit/metrics"
	"github.com/tracekit/tracekit/run"
)

// The histogram's buckets: log2 slots up to 2^63-1.
const lastSlot = 63

// collector turns what filter counts in the kernel into metrics at each
// scrape, cumulative since the start: tracekit_filter_events_total by
// event (--count) and by the keys' values too (--count-by, bounded by
// StickySeries), or the histogram tracekit_filter_value (--hist), with
// negative values, where the expression has them, under le="-1".
type collector struct {
	ev    string
	coll  *ebpf.Collection
	prog  *compile.Program
	act   compile.Action
	table *keyTable // --count-by's, drained at each scrape
}

func (c *collector) families() []metrics.Family {
	events := metrics.Family{Name: "tracekit_filter_events", Help: "Events that passed filter's --where since it started.", Type: metrics.Counter}
	eventLabel := metrics.Label{Name: "event", Value: c.ev}
	var lost uint64
	switch c.act.Kind {
	case compile.Count:
		n, _ := counts.ReadPerCPUCounter(c.coll.Maps["count"])
		events.Metrics = []metrics.Metric{{Labels: []metrics.Label{eventLabel}, Value: float64(n)}}
	case compile.CountBy:
		rows, other, kernelLost, err := c.table.scrape()
		if err != nil {
			break
		}
		lost = kernelLost
		names := keyLabels(c.prog.Columns)
		for _, r := range rows {
			labels := []metrics.Label{eventLabel}
			for i, cl := range r.cells {
				labels = append(labels, metrics.Label{Name: names[i], Value: cl.text})
			}
			events.Metrics = append(events.Metrics, metrics.Metric{Labels: labels, Value: float64(r.count)})
		}
		if other > 0 {
			labels := []metrics.Label{eventLabel}
			for _, n := range names {
				labels = append(labels, metrics.Label{Name: n, Value: "other"})
			}
			events.Metrics = append(events.Metrics, metrics.Metric{Labels: labels, Value: float64(other)})
		}
	case compile.Hist:
		h, err := counts.ReadLog2Array(c.coll.Maps["hist"])
		if err != nil {
			break
		}
		hist := run.Log2Hist(h.Counts[:], lastSlot, 1, false)
		if c.prog.Signed {
			neg, _ := counts.ReadPerCPUCounter(c.coll.Maps["neg"])
			hist.Bounds = append([]float64{-1}, hist.Bounds...)
			hist.Counts = append([]uint64{neg}, hist.Counts...)
		}
		value := metrics.Family{Name: "tracekit_filter_value", Help: "The --hist expression's values over the events that passed, since filter started.", Type: metrics.Histogram,
			Metrics: []metrics.Metric{{Labels: []metrics.Label{eventLabel, {Name: "expr", Value: c.act.Hist.Text}}, Hist: hist}}}
		return []metrics.Family{value, run.LostFamily("filter", 0)}
	}
	return []metrics.Family{events, run.LostFamily("filter", lost)}
}

// keyLabels names a --count-by key's columns as labels: valid names, none
// twice and none "event".
func keyLabels(cols []compile.Column) []string {
	used := map[string]bool{"event": true}
	names := make([]string, len(cols))
	for i, col := range cols {
		n := metrics.LabelName(col.Name)
		for base, k := n, 2; used[n]; k++ {
			n = base + "_" + strconv.Itoa(k)
		}
		used[n] = true
		names[i] = n
	}
	return names
}
