// Package terminal renders what the tools report: log2 histograms in BCC's
// byte-exact layout, and (later) tables and heatmaps.
package terminal

import (
	"fmt"
	"io"
	"math/bits"
	"strings"

	"github.com/tracekit/tracekit/internal/slots"
)

// Log2Hist is one log2 histogram: Counts[k] is the count of slot k.
type Log2Hist struct {
	Label  string
	Counts [slots.Log2]uint64
}

// Bucket is one printed row of a histogram.
type Bucket struct {
	Low   uint64 `json:"low"`
	High  uint64 `json:"high"`
	Count uint64 `json:"count"`
}

// SlotRange returns the values slot k holds, as printed: slot 1 is "0 -> 1".
func SlotRange(k int) (low, high uint64) {
	if k <= 1 {
		return 0, 1
	}
	return 1 << (k - 1), 1<<k - 1 // for k == 64, 1<<64 - 1 wraps to MaxUint64
}

// Total is the sum of all counts.
func (h *Log2Hist) Total() uint64 {
	var t uint64
	for _, c := range h.Counts {
		t += c
	}
	return t
}

// Buckets returns the rows BCC prints: from slot 1 ("0 -> 1") to the last
// non-empty slot; none for an empty histogram.
func (h *Log2Hist) Buckets() []Bucket {
	last := 0
	for k := slots.Log2 - 1; k >= 1; k-- {
		if h.Counts[k] != 0 {
			last = k
			break
		}
	}
	if last == 0 && h.Counts[0] == 0 {
		return []Bucket{}
	}
	if last == 0 {
		last = 1
	}
	out := make([]Bucket, 0, last)
	for k := 1; k <= last; k++ {
		c := h.Counts[k]
		if k == 1 {
			c += h.Counts[0] // slot 0 is never produced; never drop it either
		}
		lo, hi := SlotRange(k)
		out = append(out, Bucket{Low: lo, High: hi, Count: c})
	}
	return out
}

// WriteLog2 prints a histogram exactly as BCC's print_log2_hist does: the
// narrow layout while the last row is slot 32 or below, the wide one after.
func WriteLog2(w io.Writer, unit string, h *Log2Hist) error {
	rows := h.Buckets()
	header, row, width := "     %-19s : count     distribution\n", "%10d -> %-10d : %-8d |%-40s|\n", 40
	if len(rows) > 32 {
		header, row, width = "               %-29s : count     distribution\n", "%20d -> %-20d : %-8d |%-20s|\n", 20
	}
	var max uint64
	for _, r := range rows {
		if r.Count > max {
			max = r.Count
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, header, unit)
	for _, r := range rows {
		fmt.Fprintf(&b, row, r.Low, r.High, r.Count, stars(r.Count, max, width))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// stars is BCC's bar: floor(width*count/max) stars, without overflow for
// counts near 2^64.
func stars(count, max uint64, width int) string {
	if max == 0 || count == 0 {
		return ""
	}
	hi, lo := bits.Mul64(count, uint64(width))
	n, _ := bits.Div64(hi, lo, max)
	return strings.Repeat("*", int(n))
}
