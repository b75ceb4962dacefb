package terminal

import (
	"strings"
	"testing"
	"time"

	"github.com/gdamore/tcell/v2"

	"github.com/tracekit/tracekit/internal/golden"
)

// sampleRows is a small fixed workload: latencies drifting from ~10 us to
// ~1 ms, one row a second.
func sampleRows(n int, label string) []HeatRow {
	var rows []HeatRow
	start := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	for i := 0; i < n; i++ {
		r := HeatRow{Time: start.Add(time.Duration(i) * time.Second), Label: label}
		peak := 40 + (i*2)%20
		for d := -4; d <= 4; d++ {
			r.Counts[peak+d] = uint64(100 / (1 + d*d))
		}
		r.Counts[99] = uint64(i % 2) // a slow outlier now and then
		rows = append(rows, r)
	}
	return rows
}

func TestHeatmapStreamGoldens(t *testing.T) {
	for name, tc := range map[string]struct {
		view HeatView
		ansi bool
		rows []HeatRow
	}{
		"heat_text":        {HeatView{First: 30}, false, sampleRows(25, "")},
		"heat_ansi":        {HeatView{First: 30}, true, sampleRows(3, "")},
		"heat_text_full":   {HeatView{First: 0}, false, sampleRows(3, "")},
		"heat_text_global": {HeatView{First: 30, Global: true}, false, sampleRows(4, "")},
		"heat_text_disks":  {HeatView{First: 30, LabelWidth: 5}, false, append(sampleRows(2, "loop0"), sampleRows(2, "vda")...)},
	} {
		var b strings.Builder
		h := &HeatStream{W: &b, View: tc.view, ANSI: tc.ansi}
		if err := h.Write(tc.rows...); err != nil {
			t.Fatal(err)
		}
		golden.Check(t, name, b.String())
	}
}

func TestBannerDecades(t *testing.T) {
	b := HeatView{First: 30}.Banner()
	if len(b) != 70 || !strings.HasPrefix(b, "|1us      |10us     |100us    |1ms") || b[60:63] != "|1s" {
		t.Errorf("banner %q (%d)", b, len(b))
	}
	full := HeatView{}.Banner()
	if len(full) != 100 || !strings.HasPrefix(full, "|1ns      |10ns") || full[30:34] != "|1us" {
		t.Errorf("full banner %q", full)
	}
}

func TestShade(t *testing.T) {
	for _, tc := range []struct {
		c, m uint64
		want int
	}{{0, 5, 0}, {1, 1000, 1}, {5, 5, 9}, {1, 9, 1}, {2, 9, 2}, {8, 9, 8}, {500, 1000, 5}} {
		if got := Shade(tc.c, tc.m); got != tc.want {
			t.Errorf("Shade(%d, %d) = %d, want %d", tc.c, tc.m, got, tc.want)
		}
	}
	if GrayColor(1) != 255 || GrayColor(Levels) != 232 {
		t.Errorf("gray ramp %d..%d", GrayColor(1), GrayColor(Levels))
	}
}

func simScreen(t *testing.T, w, h int) tcell.SimulationScreen {
	t.Helper()
	s := tcell.NewSimulationScreen("UTF-8")
	if err := s.Init(); err != nil {
		t.Fatal(err)
	}
	s.SetSize(w, h)
	return s
}

// screenText returns the screen's characters, and the background colour of
// each cell as a second grid ('.' default, 'a'+shade for gray shades).
func screenText(s tcell.SimulationScreen) (string, string) {
	cells, w, h := s.GetContents()
	var txt, bg strings.Builder
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			c := cells[y*w+x]
			r := ' '
			if len(c.Runes) > 0 {
				r = c.Runes[0]
			}
			txt.WriteRune(r)
			_, back, _ := c.Style.Decompose()
			ch := byte('.')
			for sh := 1; sh <= Levels; sh++ {
				if back == tcell.PaletteColor(GrayColor(sh)) {
					ch = byte('0' + sh)
				}
			}
			bg.WriteByte(ch)
		}
		txt.WriteByte('\n')
		bg.WriteByte('\n')
	}
	return txt.String(), bg.String()
}

func TestLiveViewSimulation(t *testing.T) {
	s := simScreen(t, 100, 12)
	defer s.Fini()
	l := NewLive(s, HeatView{First: 30})
	for _, r := range sampleRows(12, "") {
		l.Add(r, "120 IO/s  slowest 7.9s  lost 0")
	}
	txt, bg := screenText(s)
	golden.Check(t, "live_100x12", txt+"\n"+bg)

	// Resizing re-lays out: more lines show more rows.
	s.SetSize(90, 16)
	if l.Handle(tcell.NewEventResize(90, 16)) {
		t.Fatal("resize quit")
	}
	txt, _ = screenText(s)
	golden.Check(t, "live_90x16", txt)

	// p pauses: new rows are kept but not drawn until p again.
	l.Handle(tcell.NewEventKey(tcell.KeyRune, 'p', 0))
	before, _ := screenText(s)
	l.Add(sampleRows(13, "")[12], "paused status")
	after, _ := screenText(s)
	if before != after || !strings.Contains(after, "PAUSED") {
		t.Errorf("paused view changed or does not say PAUSED:\n%s", after)
	}
	l.Handle(tcell.NewEventKey(tcell.KeyRune, 'p', 0))
	resumed, _ := screenText(s)
	if !strings.Contains(resumed, "paused status") || strings.Contains(resumed, "PAUSED") {
		t.Errorf("resume did not redraw:\n%s", resumed)
	}

	for _, quit := range []*tcell.EventKey{
		tcell.NewEventKey(tcell.KeyRune, 'q', 0),
		tcell.NewEventKey(tcell.KeyEscape, 0, 0),
		tcell.NewEventKey(tcell.KeyCtrlC, 0, tcell.ModCtrl),
	} {
		if !l.Handle(quit) {
			t.Errorf("%v does not quit", quit.Name())
		}
	}
	if l.Handle(tcell.NewEventKey(tcell.KeyRune, 'x', 0)) {
		t.Error("x quits")
	}
}

func TestLiveTextRampWithoutColors(t *testing.T) {
	s := simScreen(t, 100, 8)
	defer s.Fini()
	l := NewLive(s, HeatView{First: 30})
	l.text = true // as on a terminal with fewer than 256 colours
	l.Add(sampleRows(1, "")[0], "status")
	txt, bg := screenText(s)
	if !strings.Contains(txt, "@") || strings.ContainsAny(bg, "123456789") {
		t.Errorf("text mode should use the ramp and no backgrounds:\n%s\n%s", txt, bg)
	}
}

// BenchmarkHeatFrame is the cost of one frame of the live view: a new row
// arrives, 200 rows of 100 slots scroll up and are drawn (on a simulation
// screen, which stands in for the terminal's output).
func BenchmarkHeatFrame(b *testing.B) {
	s := tcell.NewSimulationScreen("UTF-8")
	if err := s.Init(); err != nil {
		b.Fatal(err)
	}
	s.SetSize(120, 203)
	l := NewLive(s, HeatView{First: 0})
	rows := sampleRows(400, "")
	for _, r := range rows[:200] {
		l.rows = append(l.rows, r)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		l.Add(rows[200+i%200], "status")
	}
}

// BenchmarkHeatFrameANSI is one 200-row frame of the ANSI stream renderer.
func BenchmarkHeatFrameANSI(b *testing.B) {
	rows := sampleRows(200, "")
	v := HeatView{First: 0}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var sb strings.Builder
		h := &HeatStream{W: &sb, View: v, ANSI: true}
		if err := h.Write(rows...); err != nil {
			b.Fatal(err)
		}
	}
}
