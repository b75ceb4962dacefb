package run

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/tracekit/tracekit/terminal"
)

// HistReport is one report of a histogram tool.
type HistReport struct {
	Unit string // bytes, usecs or msecs
	// LabelKind names what a label is ("process", "disk") in text output.
	LabelKind string
	Hists     []*terminal.Log2Hist
	Lost      uint64
	// LostWhy says in text output what makes an event lost ("map full"
	// if empty).
	LostWhy string
	// Below, if set, counts values below zero: a signed value's negative
	// side has no log2 slot.
	Below *uint64
}

type jsonHist struct {
	Label   string            `json:"label"`
	Total   uint64            `json:"total"`
	Buckets []terminal.Bucket `json:"buckets"`
}

type jsonHistReport struct {
	Tool       string     `json:"tool"`
	Time       string     `json:"time"`
	Unit       string     `json:"unit"`
	Histograms []jsonHist `json:"histograms"`
	Lost       uint64     `json:"lost"`
	Below      *uint64    `json:"below_zero,omitempty"`
}

// JSONTime is the time format of every JSON report: UTC, milliseconds.
func JSONTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

// WriteHist prints a histogram report as text or JSON, per the options.
// Reports after the first are separated by a blank line in text.
func (s *Session) WriteHist(r *HistReport, now time.Time) error {
	if s.Opts.JSON {
		out := jsonHistReport{Tool: s.Tool, Time: JSONTime(now), Unit: r.Unit, Histograms: []jsonHist{}, Lost: r.Lost, Below: r.Below}
		for _, h := range r.Hists {
			out.Histograms = append(out.Histograms, jsonHist{Label: h.Label, Total: h.Total(), Buckets: h.Buckets()})
		}
		return s.WriteJSON(out)
	}
	var b strings.Builder
	s.BeginText(&b, now)
	for i, h := range r.Hists {
		if h.Label != "" || r.LabelKind != "" {
			if i > 0 {
				b.WriteString("\n")
			}
			fmt.Fprintf(&b, "%s = %s\n", r.LabelKind, terminal.Printable(h.Label))
		}
		if err := terminal.WriteLog2(&b, r.Unit, h); err != nil {
			return err
		}
	}
	if len(r.Hists) == 0 {
		b.WriteString("(no events)\n")
	}
	if r.Below != nil && *r.Below > 0 {
		fmt.Fprintf(&b, "below zero: %d (no log2 slot; not in the histogram)\n", *r.Below)
	}
	if r.Lost > 0 {
		why := r.LostWhy
		if why == "" {
			why = "map full"
		}
		fmt.Fprintf(&b, "lost: %d events could not be counted (%s)\n", r.Lost, why)
	}
	_, err := fmt.Fprint(s.Stdout, b.String())
	return err
}

// WriteJSON prints one report as a line of JSON on stdout.
func (s *Session) WriteJSON(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	_, err = fmt.Fprintf(s.Stdout, "%s\n", b)
	return err
}

// BeginText starts a text report: a blank line between reports, and the
// time with -T.
func (s *Session) BeginText(b *strings.Builder, now time.Time) {
	if s.reports > 0 {
		b.WriteString("\n")
	}
	s.reports++
	if s.Opts.Timestamp {
		fmt.Fprintf(b, "%-8s\n", now.Format("15:04:05"))
	}
}
