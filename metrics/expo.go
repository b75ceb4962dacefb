// Package metrics serves a tool's counts to Prometheus: the text exposition
// format (0.0.4) and OpenMetrics 1.0.0, chosen by the scrape's Accept
// header, over a small HTTP/1.1 server (server.go).
//
// Both are written here rather than through prometheus/client_golang: the
// library itself is small, but it needs net/http, whose server links TLS
// and the FIPS crypto module, 3.6 MB of a 7 MB binary (measured on the
// multi-call binary: 6.7 MB without, 10.4 MB with). The formats are a page
// of grammar each; the tests parse what is written here with Prometheus.
package metrics

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
)

// Type is a metric family's type.
type Type int

const (
	Counter   Type = iota // samples NAME_total
	Gauge                 // samples NAME
	Histogram             // samples NAME_bucket{le}, NAME_count, NAME_sum where exact
	Info                  // samples NAME_info, value 1 (a gauge in the text format)
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

// Metric is one series (a histogram: its series) of a family.
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
	Sum    *float64 // only where the sum is exact; the _sum sample is left out otherwise
}

// Formats a scrape may ask for.
const (
	TextType        = "text/plain; version=0.0.4; charset=utf-8"
	OpenMetricsType = "application/openmetrics-text; version=1.0.0; charset=utf-8"
)

// Negotiate picks the format for an Accept header: OpenMetrics when the
// scraper lists it (Prometheus does, first), else the text format.
func Negotiate(accept string) string {
	for _, part := range strings.Split(accept, ",") {
		media, _, _ := strings.Cut(part, ";")
		if strings.EqualFold(strings.TrimSpace(media), "application/openmetrics-text") {
			return OpenMetricsType
		}
	}
	return TextType
}

// Write writes families in format (TextType or OpenMetricsType), series in
// the order of their labels.
func Write(w io.Writer, format string, families []Family) error {
	bw := bufio.NewWriter(w)
	om := format == OpenMetricsType
	for _, f := range families {
		writeFamily(bw, f, om)
	}
	if om {
		bw.WriteString("# EOF\n")
	}
	return bw.Flush()
}

func writeFamily(w *bufio.Writer, f Family, om bool) {
	name, typ := f.Name, ""
	switch f.Type {
	case Counter:
		typ = "counter"
		if !om {
			name += "_total"
		}
	case Gauge:
		typ = "gauge"
	case Histogram:
		typ = "histogram"
	case Info:
		typ = "info"
		if !om {
			name, typ = name+"_info", "gauge"
		}
	}
	fmt.Fprintf(w, "# HELP %s %s\n", name, escapeHelp(f.Help, om))
	fmt.Fprintf(w, "# TYPE %s %s\n", name, typ)
	ms := append([]Metric(nil), f.Metrics...)
	sort.SliceStable(ms, func(i, j int) bool { return labelKey(ms[i].Labels) < labelKey(ms[j].Labels) })
	for _, m := range ms {
		switch f.Type {
		case Counter:
			sample(w, f.Name+"_total", m.Labels, nil, m.Value)
		case Gauge:
			sample(w, f.Name, m.Labels, nil, m.Value)
		case Info:
			sample(w, f.Name+"_info", m.Labels, nil, 1)
		case Histogram:
			h := m.Hist
			var cum uint64
			for i, b := range h.Bounds {
				cum += h.Counts[i]
				sample(w, f.Name+"_bucket", m.Labels, &Label{"le", formatBound(b, om)}, float64(cum))
			}
			cum += h.Counts[len(h.Bounds)]
			sample(w, f.Name+"_bucket", m.Labels, &Label{"le", "+Inf"}, float64(cum))
			sample(w, f.Name+"_count", m.Labels, nil, float64(cum))
			if h.Sum != nil {
				sample(w, f.Name+"_sum", m.Labels, nil, *h.Sum)
			}
		}
	}
}

func sample(w *bufio.Writer, name string, labels []Label, extra *Label, v float64) {
	w.WriteString(name)
	if len(labels) > 0 || extra != nil {
		w.WriteByte('{')
		for i, l := range labels {
			if i > 0 {
				w.WriteByte(',')
			}
			writeLabel(w, l)
		}
		if extra != nil {
			if len(labels) > 0 {
				w.WriteByte(',')
			}
			writeLabel(w, *extra)
		}
		w.WriteByte('}')
	}
	w.WriteByte(' ')
	w.WriteString(formatFloat(v))
	w.WriteByte('\n')
}

func writeLabel(w *bufio.Writer, l Label) {
	w.WriteString(l.Name)
	w.WriteString(`="`)
	w.WriteString(escapeValue(l.Value))
	w.WriteByte('"')
}

// escapeValue escapes a label value for both formats: backslash, double
// quote and newline; bytes that are not UTF-8 (a task name may hold any)
// become U+FFFD, since Prometheus refuses a scrape with them.
func escapeValue(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if !strings.ContainsAny(s, "\\\"\n") {
		return s
	}
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}

func escapeHelp(s string, om bool) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if om {
		return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
	}
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(s)
}

// formatBound prints a bucket bound: OpenMetrics wants le values as
// floats ("1.0"), the text format has always had "1".
func formatBound(v float64, om bool) string {
	s := formatFloat(v)
	if om && !strings.ContainsAny(s, ".eIN") {
		s += ".0"
	}
	return s
}

// formatFloat prints integral values as integers, others in Go's shortest
// form.
func formatFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	case v == math.Trunc(v) && math.Abs(v) < 1e15:
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

func labelKey(ls []Label) string {
	var b strings.Builder
	for _, l := range ls {
		b.WriteString(l.Name)
		b.WriteByte(0)
		b.WriteString(l.Value)
		b.WriteByte(0)
	}
	return b.String()
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
