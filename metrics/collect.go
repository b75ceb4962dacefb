package metrics

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tracekit/tracekit/internal/crash"
)

// collector adapts a tool's collect function to client_golang. The tools'
// collectors keep state (series assigned for good, the last counts) and
// read the kernel's maps, so they run one at a time: scrapes that come
// while a collection runs wait for it and share its result, and a hundred
// scrapes at once cost about one collection, not a hundred in a row.
type collector struct {
	collect func() []Family
	mu      sync.Mutex
	flight  *flight // the collection under way, if any
	closed  bool
}

// flight is one run of collect, shared by the scrapes that wait for it.
type flight struct {
	done     chan struct{}
	families []Family
	err      error
}

func newCollector(collect func() []Family) *collector {
	return &collector{collect: collect}
}

// errClosed answers the scrapes that come after close: the maps a
// collection would read are being freed.
var errClosed = errors.New("the tool is ending: its maps are closed")

var errDesc = prometheus.NewDesc("tracekit_collect_error", "A collection that failed.", nil, nil)

// Describe sends nothing: the families and their label sets follow what
// the kernel counted, so the collector is unchecked.
func (c *collector) Describe(chan<- *prometheus.Desc) {}

// Collect sends the families of one collection, or one invalid metric
// (a 500 for the scrape) when it failed or panicked.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	families, err := c.gather()
	if err == nil {
		var ms []prometheus.Metric
		ms, err = constMetrics(families)
		for _, m := range ms {
			ch <- m
		}
	}
	if err != nil {
		ch <- prometheus.NewInvalidMetric(errDesc, err)
	}
}

// gather runs collect, or waits for the run under way and shares its
// result.
func (c *collector) gather() ([]Family, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, errClosed
	}
	if f := c.flight; f != nil {
		c.mu.Unlock()
		<-f.done
		return f.families, f.err
	}
	f := &flight{done: make(chan struct{})}
	c.flight = f
	c.mu.Unlock()
	c.run(f)
	c.mu.Lock()
	c.flight = nil
	c.mu.Unlock()
	close(f.done)
	return f.families, f.err
}

// run runs one collection; a panic in it fails that collection, not the
// tool.
func (c *collector) run(f *flight) {
	defer func() {
		if p := recover(); p != nil {
			f.families, f.err = nil, crash.Error("internal error in the collection", p)
		}
	}()
	f.families = c.collect()
}

// close waits for the collection under way, if any, and refuses the later
// ones: the caller frees the maps next.
func (c *collector) close() {
	c.mu.Lock()
	c.closed = true
	f := c.flight
	c.mu.Unlock()
	if f != nil {
		<-f.done
	}
}

// constMetrics turns families into client_golang's constant metrics.
func constMetrics(families []Family) ([]prometheus.Metric, error) {
	var out []prometheus.Metric
	for _, f := range families {
		name := f.Name
		switch f.Type {
		case Counter:
			name += "_total"
		case Info:
			name += "_info"
		}
		descs := map[string]*prometheus.Desc{}
		for _, m := range f.Metrics {
			names := make([]string, len(m.Labels))
			values := make([]string, len(m.Labels))
			for i, l := range m.Labels {
				// A task name may hold any bytes; Prometheus refuses a
				// scrape with a label value that is not UTF-8.
				names[i], values[i] = l.Name, strings.ToValidUTF8(l.Value, "\uFFFD")
			}
			key := strings.Join(names, "\x00")
			desc := descs[key]
			if desc == nil {
				desc = prometheus.NewDesc(name, f.Help, names, nil)
				descs[key] = desc
			}
			var pm prometheus.Metric
			var err error
			switch f.Type {
			case Counter:
				pm, err = prometheus.NewConstMetric(desc, prometheus.CounterValue, m.Value, values...)
			case Gauge:
				pm, err = prometheus.NewConstMetric(desc, prometheus.GaugeValue, m.Value, values...)
			case Info:
				pm, err = prometheus.NewConstMetric(desc, prometheus.GaugeValue, 1, values...)
			case Histogram:
				pm, err = constHist(desc, m.Hist, values)
			}
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			out = append(out, pm)
		}
	}
	return out, nil
}

func constHist(desc *prometheus.Desc, h *Hist, values []string) (prometheus.Metric, error) {
	if h == nil || len(h.Counts) != len(h.Bounds)+1 {
		return nil, errors.New("a histogram needs one count per bound and one above")
	}
	buckets := make(map[float64]uint64, len(h.Bounds))
	var cum uint64
	for i, b := range h.Bounds {
		cum += h.Counts[i]
		buckets[b] = cum
	}
	cum += h.Counts[len(h.Bounds)]
	sum := math.NaN()
	if h.Sum != nil {
		sum = *h.Sum
	}
	return prometheus.NewConstHistogram(desc, cum, sum, buckets, values...)
}
