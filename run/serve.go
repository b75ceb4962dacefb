package run

import (
	"fmt"
	"runtime"
	"sort"
	"strings"

	"github.com/tracekit/tracekit/internal/usage"
	"github.com/tracekit/tracekit/metrics"
)

// ServeOption is --serve, for the tools that aggregate in the kernel.
// Tools embed it in their options.
type ServeOption struct {
	Serve string `long:"serve" value-name:"ADDR" description:"Serve the counts to Prometheus at http://ADDR/metrics (127.0.0.1:9435, or :9435 for every address), read from the kernel's maps at each scrape and cumulative since the start; /healthz answers ok. Reports still print as without it. Once attached, the run drops every capability it no longer needs (reading maps by descriptor needs none; kernels before 6.4 with unprivileged BPF disabled keep cap_bpf for it): the serving line says what was kept"`
}

// CheckServe validates --serve's address before anything is loaded.
func (o *ServeOption) CheckServe() error {
	if o.Serve == "" {
		return nil
	}
	if _, err := metrics.ParseAddr(o.Serve); err != nil {
		return usage.Errorf("--serve %v", err)
	}
	return nil
}

// ServeMetrics serves collect's families, with tracekit_build_info, at
// addr until the session closes. collect runs at each scrape, one at a
// time; it reads the maps, and must not disturb the interval reports.
// It comes once everything is attached: it drops the capabilities the run
// no longer needs (see privilege.go).
func (s *Session) ServeMetrics(addr string, collect func() []metrics.Family) error {
	build := metrics.Family{Name: "tracekit_build", Help: "The tracekit build serving these metrics (value 1).", Type: metrics.Info, Metrics: []metrics.Metric{{Labels: []metrics.Label{
		{Name: "tool", Value: s.Tool}, {Name: "version", Value: Version}, {Name: "revision", Value: Commit}, {Name: "goversion", Value: runtime.Version()},
	}}}}
	srv, err := metrics.Listen(addr, func() []metrics.Family { return append(collect(), build) })
	if err != nil {
		return fmt.Errorf("--serve %s: %w", addr, err)
	}
	go srv.Serve()
	s.OnClose("stop serving metrics", srv.Close)
	kept, err := s.dropCapabilities()
	if err != nil {
		return err
	}
	what := "every capability dropped"
	if len(kept) > 0 {
		what = "capabilities dropped but " + strings.Join(kept, ", ")
	}
	fmt.Fprintf(s.Stderr, "%s: serving metrics at http://%s/metrics (%s)\n", s.Tool, srv.Addr(), what)
	return nil
}

// LostFamily is tracekit_lost_total: the events a tool could not count (a
// full map or ring) since the start.
func LostFamily(tool string, n uint64) metrics.Family {
	return metrics.Family{Name: "tracekit_lost", Help: "Events the tool could not count since it started: a map or ring buffer was full.", Type: metrics.Counter,
		Metrics: []metrics.Metric{{Labels: []metrics.Label{{Name: "tool", Value: tool}}, Value: float64(n)}}}
}

// Log2Hist is a log2 histogram's slots (slots.Log2: slot 1 holds 0 and 1,
// slot k the values from 2^(k-1) to 2^k-1) as a Prometheus histogram with
// the fixed buckets of slots 1 to last: the bound of slot k is 2^k-1 over
// div (1e6 for microseconds as seconds), or 2^k over div for values
// truncated to whole units (a latency
// in microseconds measured in nanoseconds is below 2^k units, not at most
// 2^k-1). Counts above slot last go to the +Inf bucket. The same buckets
// at every scrape, as Prometheus' histogram functions want them.
func Log2Hist(counts []uint64, last int, div float64, truncated bool) *metrics.Hist {
	h := &metrics.Hist{Counts: make([]uint64, last+1)}
	for k := 1; k <= last; k++ {
		bound := float64(uint64(1)<<k - 1)
		if truncated {
			bound = float64(uint64(1) << k)
		}
		h.Bounds = append(h.Bounds, bound/div) // exact operands: the nearest double to the decimal
	}
	for k, c := range counts {
		switch {
		case k == 0:
			h.Counts[0] += c // never filled: 0 is in slot 1
		case k <= last:
			h.Counts[k-1] += c
		default:
			h.Counts[last] += c
		}
	}
	return h
}

// StickySeries bounds a label set: the first time a key is seen, it gets a
// series of its own if fewer than max have one (the largest counts of that
// scrape first); every other key is summed into "other" for good. A key
// never moves between series, so every series only grows, as a counter
// must, and Prometheus' rate() and increase() stay right. It remembers the
// keys with series alone: once they are max, no key seen later can get
// one, so the others need not be remembered (a run that sees millions of
// keys holds max).
type StickySeries[K comparable] struct {
	Max int
	own map[K]bool
}

// Assign says, for each key of counts, whether it has a series of its own.
func (s *StickySeries[K]) Assign(counts map[K]uint64, less func(a, b K) bool) map[K]bool {
	if s.own == nil {
		s.own = map[K]bool{}
	}
	if len(s.own) >= s.Max {
		return s.own
	}
	var fresh []K
	for k := range counts {
		if !s.own[k] {
			fresh = append(fresh, k)
		}
	}
	sort.Slice(fresh, func(i, j int) bool {
		a, b := fresh[i], fresh[j]
		if counts[a] != counts[b] {
			return counts[a] > counts[b]
		}
		return less(a, b)
	})
	for _, k := range fresh[:min(len(fresh), s.Max-len(s.own))] {
		s.own[k] = true
	}
	return s.own
}
