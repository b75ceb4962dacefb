package terminal

import (
	"strconv"
	"strings"
	"sync"

	"github.com/gdamore/tcell/v2"

	"github.com/tracekit/tracekit/internal/slots"
)

// Live is the full-screen heatmap: the legend and the decade banner at the
// top, rows scrolling up with the newest at the bottom, a status line last.
// It draws onto any tcell.Screen, so tests use a simulation screen.
type Live struct {
	mu     sync.Mutex
	screen tcell.Screen
	view   HeatView
	rows   []HeatRow
	status string
	paused bool
	text   bool // fewer than 256 colours: the character ramp instead
	// shadow is what this view last put in each cell: tcell's own
	// SetContent is costly, and most cells of a heatmap stay blank from one
	// frame to the next. Styles are compared by index into styles: a
	// tcell.Style is too large to compare per cell.
	shadow  []shadowCell
	shadowW int
	styles  [numStyles]tcell.Style
}

// Style indexes: the plain style, the gray shades 1..Levels, then these.
const (
	stylePlain  = 0
	styleBold   = Levels + 1
	styleStatus = Levels + 2
	numStyles   = Levels + 3
)

type shadowCell struct {
	r     rune
	style uint8
	set   bool
}

// set puts a cell unless it already holds exactly that.
func (l *Live) set(x, y int, r rune, style uint8) {
	i := y*l.shadowW + x
	if i >= 0 && i < len(l.shadow) {
		c := &l.shadow[i]
		if c.set && c.r == r && c.style == style {
			return
		}
		*c = shadowCell{r, style, true}
	}
	l.screen.SetContent(x, y, r, nil, l.styles[style])
}

// maxLiveRows bounds the rows kept for redraws.
const maxLiveRows = 1000

// NewLive prepares a live view on an initialised screen.
func NewLive(s tcell.Screen, v HeatView) *Live {
	l := &Live{screen: s, view: v, text: s.Colors() < 256}
	l.styles[stylePlain] = tcell.StyleDefault
	for sh := 1; sh <= Levels; sh++ {
		l.styles[sh] = tcell.StyleDefault.Background(tcell.PaletteColor(GrayColor(sh)))
	}
	l.styles[styleBold] = tcell.StyleDefault.Bold(true)
	l.styles[styleStatus] = tcell.StyleDefault.Reverse(true)
	return l
}

// Add appends a row and redraws, unless paused (the row is kept and shown
// when the view resumes).
func (l *Live) Add(r HeatRow, status string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rows = append(l.rows, r)
	if len(l.rows) > maxLiveRows {
		l.rows = l.rows[len(l.rows)-maxLiveRows:]
	}
	l.status = status
	if !l.paused {
		l.draw()
	}
}

// Handle reacts to a terminal event; it returns true when the user quits
// (q, Esc or Ctrl-C: in raw mode Ctrl-C is a key, not SIGINT).
func (l *Live) Handle(ev tcell.Event) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch ev := ev.(type) {
	case *tcell.EventResize:
		l.screen.Sync()
		l.shadow = nil
		l.draw()
	case *tcell.EventKey:
		switch {
		case ev.Key() == tcell.KeyEscape, ev.Key() == tcell.KeyCtrlC, ev.Rune() == 'q', ev.Rune() == 'Q':
			return true
		case ev.Rune() == 'p', ev.Rune() == 'P', ev.Rune() == ' ':
			l.paused = !l.paused
			l.draw()
		}
	}
	return false
}

// Draw redraws the whole view.
func (l *Live) Draw() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.draw()
}

// put writes s from column x of line y, up to the screen's width, and
// returns the column after it.
func (l *Live) put(x, y int, s string, style uint8) int {
	w, _ := l.screen.Size()
	for _, r := range s {
		if x >= w {
			break
		}
		l.set(x, y, r, style)
		x++
	}
	return x
}

// pad blanks line y from column x to its end.
func (l *Live) pad(x, y int) {
	w, _ := l.screen.Size()
	for ; x < w; x++ {
		l.set(x, y, ' ', stylePlain)
	}
}

// line writes s at the start of line y and blanks the rest of the line, so
// every cell is set once per frame (no Clear, which would set them twice).
func (l *Live) line(y int, s string, style uint8) { l.pad(l.put(0, y, s, style), y) }

func (l *Live) draw() {
	s := l.screen
	w, h := s.Size()
	if len(l.shadow) != w*h || l.shadowW != w {
		l.shadow, l.shadowW = make([]shadowCell, w*h), w
	}
	legend := "latency heatmap: light = few, dark = many IOs"
	if l.text {
		legend = "latency heatmap: " + Ramp[1:] + " = few to many IOs"
	}
	if l.view.Global {
		legend += " (shade relative to the largest cell shown)"
	} else {
		legend += " (shade relative to each row's largest cell)"
	}
	l.line(0, legend, styleBold)
	pw := l.view.PrefixWidth()
	l.line(1, strings.Repeat(" ", pw)+l.view.Banner(), stylePlain)
	// Rows fill lines 2 .. h-2, the newest at the bottom.
	room := max(h-3, 0)
	rows := l.rows
	if len(rows) > room {
		rows = rows[len(rows)-room:]
	}
	var global uint64
	for i := range rows {
		global = max(global, rows[i].Max())
	}
	top := h - 1 - len(rows)
	for y := 2; y < top; y++ {
		l.line(y, "", stylePlain)
	}
	for i := range rows {
		r := &rows[i]
		y := top + i
		m := global
		if !l.view.Global {
			m = r.Max()
		}
		x := l.put(0, y, l.view.prefix(r), stylePlain)
		for slot := l.view.First; slot < slots.Decade && x < w; slot++ {
			sh := Shade(r.Counts[slot], m)
			switch {
			case sh == 0:
				l.set(x, y, ' ', stylePlain)
			case l.text:
				l.set(x, y, rune(Ramp[sh]), stylePlain)
			default:
				l.set(x, y, ' ', uint8(sh))
			}
			x++
		}
		l.pad(l.put(x, y, " "+strconv.FormatUint(r.Total(), 10), stylePlain), y)
	}
	status := l.status + "   p: pause  q: quit"
	if l.paused {
		status = "PAUSED   " + status
	}
	l.line(h-1, status, styleStatus)
	s.Show()
}
