// Package metrics serves a tool's counts to Prometheus. A tool describes
// what it counts as Families, read from the kernel's maps at each scrape;
// prometheus/client_golang turns them into the text format or OpenMetrics
// (chosen by the scrape's Accept header, gzipped when asked), and net/http
// serves them (server.go).
package metrics

import (
	"bytes"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// Type is a metric family's type.
type Type int

const (
	Counter   Type = iota // samples NAME_total
	Gauge                 // samples NAME
	Histogram             // samples NAME_bucket{le}, NAME_count, NAME_sum
	Info                  // samples NAME_info, value 1 (a gauge)
)

// Family is the metrics of one name.
type Family struct {
	Name    string // without the _total or _info suffix
	Help    string
	Type    Type
	Metrics []Metric
}

// Label is a label's name and value.
type Label struct{ Name, Value string }

// Metric is one series (a histogram: its series) of a family. Every
// metric of a family has the same label names.
type Metric struct {
	Labels []Label
	Value  float64 // Counter, Gauge; Info: 1
	Hist   *Hist   // Histogram
}

// Hist is a histogram's buckets, not cumulative: Counts[i] counts the
// values in (Bounds[i-1], Bounds[i]], and Counts[len(Bounds)] those above
// the last bound.
type Hist struct {
	Bounds []float64
	Counts []uint64
	// Sum is the sum of the values where it is exact. The tools' kernel
	// histograms count slots, not sums: nil writes _sum as NaN (not a
	// number: unknown), where client_golang would write a false 0.
	Sum *float64
}

// Formats a scrape may get.
var (
	TextFormat        = expfmt.NewFormat(expfmt.TypeTextPlain)
	OpenMetricsFormat = expfmt.NewFormat(expfmt.TypeOpenMetrics)
)

// Exposition is families as a scrape in format gets them: the same
// registry and encoder as the server's, for the goldens.
func Exposition(families []Family, format expfmt.Format) (string, error) {
	reg := prometheus.NewRegistry()
	c := newCollector(func() []Family { return families })
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		return "", err
	}
	var b bytes.Buffer
	enc := expfmt.NewEncoder(&b, format)
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			return "", err
		}
	}
	if closer, ok := enc.(expfmt.Closer); ok {
		if err := closer.Close(); err != nil {
			return "", err
		}
	}
	return b.String(), nil
}

// LabelName turns a field, path or expression (skb->len, args->filename)
// into a valid label name: runs of other characters become one '_'.
func LabelName(s string) string {
	var b strings.Builder
	under := false
	for _, r := range s {
		ok := r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
		if ok {
			b.WriteRune(r)
			under = false
		} else if !under && b.Len() > 0 {
			b.WriteByte('_')
			under = true
		}
	}
	out := strings.TrimRight(b.String(), "_")
	if out == "" || strings.HasPrefix(out, "__") || out[0] >= '0' && out[0] <= '9' {
		out = "x" + out // names starting with __ are Prometheus' own
	}
	return out
}
