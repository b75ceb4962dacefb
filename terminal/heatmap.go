package terminal

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/tracekit/tracekit/internal/slots"
)

// HeatRow is one interval of a latency heatmap.
type HeatRow struct {
	Time   time.Time
	Label  string // the disk with -D, else ""
	Counts [slots.Decade]uint64
}

// Total is the row's event count.
func (r *HeatRow) Total() uint64 {
	var t uint64
	for _, c := range r.Counts {
		t += c
	}
	return t
}

// Max is the row's largest cell.
func (r *HeatRow) Max() uint64 {
	var m uint64
	for _, c := range r.Counts {
		m = max(m, c)
	}
	return m
}

// HeatView says which slots are shown and how cells are shaded.
type HeatView struct {
	First      int  // first slot shown: 30 (1 us) by default, 0 with --full
	Global     bool // shade against the largest cell of all rows, not the row's
	LabelWidth int  // width of the label column, 0 without labels
}

// Columns is how many slots the view shows.
func (v HeatView) Columns() int { return slots.Decade - v.First }

// Levels is the number of shades for a non-empty cell.
const Levels = 9

// Ramp is the text ramp: index 0 (blank) is an empty cell, 1..9 few to many.
const Ramp = " .:-=+*#%@"

// Shade returns 0 for an empty cell, else 1 (few) .. Levels (the maximum):
// ceil(Levels * count / max), as tracex3 shades relative to the row's max.
func Shade(count, maxCount uint64) int {
	if count == 0 || maxCount == 0 {
		return 0
	}
	if count >= maxCount {
		return Levels
	}
	return int((count*Levels + maxCount - 1) / maxCount)
}

// GrayColor is the 256-colour palette index of a shade: light gray for few
// events (255) to near black for many (232).
func GrayColor(shade int) int {
	return 255 - (shade-1)*23/(Levels-1)
}

// decadeNames are the labels of slots 0, 10, ... 90.
var decadeNames = []string{"1ns", "10ns", "100ns", "1us", "10us", "100us", "1ms", "10ms", "100ms", "1s"}

// Banner is the decade ruler over the cells: "|1us      |10us     |...".
func (v HeatView) Banner() string {
	var b strings.Builder
	for s := v.First; s < slots.Decade; {
		if s%10 == 0 {
			name := "|" + decadeNames[s/10]
			w := min(10, slots.Decade-s)
			if len(name) > w {
				name = name[:w]
			}
			b.WriteString(fmt.Sprintf("%-*s", w, name))
			s += w
			continue
		}
		b.WriteByte(' ')
		s++
	}
	return b.String()
}

// prefix is what precedes the cells on a row: the time and the label.
func (v HeatView) prefix(r *HeatRow) string {
	p := r.Time.Format("15:04:05") + " "
	if v.LabelWidth > 0 {
		p += fmt.Sprintf("%-*s ", v.LabelWidth, r.Label)
	}
	return p
}

// PrefixWidth is the width of prefix.
func (v HeatView) PrefixWidth() int {
	w := len("15:04:05 ")
	if v.LabelWidth > 0 {
		w += v.LabelWidth + 1
	}
	return w
}

// Legend explains the shades, in the given mode.
func (v HeatView) Legend(ansi bool) string {
	scale := "each row's largest cell"
	if v.Global {
		scale = "the largest cell so far"
	}
	if ansi {
		var b strings.Builder
		for s := 1; s <= Levels; s++ {
			fmt.Fprintf(&b, "\x1b[48;5;%dm \x1b[0m", GrayColor(s))
		}
		return fmt.Sprintf("latency heatmap: light = few, dark = many IOs (%s relative to %s); each row ends with its IO count", b.String(), scale)
	}
	return fmt.Sprintf("latency heatmap: %q few to many IOs (relative to %s); each row ends with its IO count", Ramp[1:], scale)
}

// TextRow renders a row with the character ramp.
func (v HeatView) TextRow(r *HeatRow, maxCount uint64) string {
	var b strings.Builder
	b.WriteString(v.prefix(r))
	for s := v.First; s < slots.Decade; s++ {
		b.WriteByte(Ramp[Shade(r.Counts[s], maxCount)])
	}
	fmt.Fprintf(&b, " %d", r.Total())
	return b.String()
}

// ANSIRow renders a row with 256-colour gray backgrounds, emitting an
// escape only where the shade changes.
func (v HeatView) ANSIRow(r *HeatRow, maxCount uint64) string {
	var b strings.Builder
	b.WriteString(v.prefix(r))
	cur := 0
	for s := v.First; s < slots.Decade; s++ {
		sh := Shade(r.Counts[s], maxCount)
		if sh != cur {
			if sh == 0 {
				b.WriteString("\x1b[0m")
			} else {
				fmt.Fprintf(&b, "\x1b[48;5;%dm", GrayColor(sh))
			}
			cur = sh
		}
		b.WriteByte(' ')
	}
	if cur != 0 {
		b.WriteString("\x1b[0m")
	}
	fmt.Fprintf(&b, " %d", r.Total())
	return b.String()
}

// HeatStream writes heatmap rows as they come, for a pipe or a file: the
// legend once, the banner every 20 rows.
type HeatStream struct {
	W      io.Writer
	View   HeatView
	ANSI   bool
	rows   int
	global uint64
}

// BannerEvery is how many rows a banner covers in a stream.
const BannerEvery = 20

// Write prints rows.
func (h *HeatStream) Write(rows ...HeatRow) error {
	var b strings.Builder
	for i := range rows {
		r := &rows[i]
		if h.rows == 0 {
			b.WriteString(h.View.Legend(h.ANSI) + "\n")
		}
		if h.rows%BannerEvery == 0 {
			b.WriteString(strings.Repeat(" ", h.View.PrefixWidth()) + h.View.Banner() + "\n")
		}
		h.rows++
		m := r.Max()
		if h.View.Global {
			h.global = max(h.global, m)
			m = h.global
		}
		if h.ANSI {
			b.WriteString(h.View.ANSIRow(r, m))
		} else {
			b.WriteString(h.View.TextRow(r, m))
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(h.W, b.String())
	return err
}
