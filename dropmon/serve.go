package dropmon

import (
	"strings"

	"github.com/tracekit/tracekit/metrics"
	"github.com/tracekit/tracekit/procfs"
	"github.com/tracekit/tracekit/run"
)

// collector turns the drop counts into tracekit_dropmon_drops_total at each
// scrape: by function (no kernel address is exposed: KASLR) and reason,
// the locations bounded by StickySeries.
type collector struct {
	r      *reporter
	syms   *procfs.Symbols
	series run.StickySeries[uint64]
}

type seriesKey struct{ symbol, reason string }

func (c *collector) families() []metrics.Family {
	drops := metrics.Family{Name: "tracekit_dropmon_drops", Help: "Packets the kernel dropped (skb:kfree_skb) since dropmon started, by the dropping function and the drop reason (5.17+).", Type: metrics.Counter}
	cur, lost, err := c.r.readCounts()
	if err != nil {
		return []metrics.Family{drops, run.LostFamily("dropmon", lost)}
	}
	byLocation := map[uint64]uint64{}
	for k, n := range cur {
		byLocation[k.Location] += n
	}
	own := c.series.Assign(byLocation, func(a, b uint64) bool { return a < b })
	var addrs []uint64
	for a := range own {
		addrs = append(addrs, a)
	}
	_ = c.syms.Resolve(addrs) // unnamed, they are "unknown"
	sums := map[seriesKey]uint64{}
	for k, n := range cur {
		symbol := "other"
		if own[k.Location] {
			symbol = function(c.syms.Symbolize(k.Location))
		}
		sums[seriesKey{symbol, c.r.reasonName(k.Reason)}] += n
	}
	for k, n := range sums {
		drops.Metrics = append(drops.Metrics, metrics.Metric{Labels: []metrics.Label{{Name: "symbol", Value: k.symbol}, {Name: "reason", Value: k.reason}}, Value: float64(n)})
	}
	return []metrics.Family{drops, run.LostFamily("dropmon", lost)}
}

// function is the function of "name+0xoff [module]": name, or "unknown".
func function(sym string) string {
	name, _, _ := strings.Cut(sym, "+0x")
	if name == "" {
		return "unknown"
	}
	return name
}
