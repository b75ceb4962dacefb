package terminal

import (
	"io"
	"sync"
	"testing"

	"github.com/gdamore/tcell/v2"
)

// fakeTty is a terminal of a fixed size whose output is thrown away: tcell's
// real terminal code path (escape sequences for dirty cells only) without a
// terminal.
type fakeTty struct {
	w, h    int
	once    sync.Once
	closed  chan struct{}
	written int
}

func newFakeTty(w, h int) *fakeTty { return &fakeTty{w: w, h: h, closed: make(chan struct{})} }

func (t *fakeTty) Start() error                { return nil }
func (t *fakeTty) Stop() error                 { return nil }
func (t *fakeTty) Drain() error                { return t.Close() }
func (t *fakeTty) NotifyResize(func())         {}
func (t *fakeTty) Write(p []byte) (int, error) { t.written += len(p); return len(p), nil }
func (t *fakeTty) Close() error                { t.once.Do(func() { close(t.closed) }); return nil }
func (t *fakeTty) Read(p []byte) (int, error) {
	<-t.closed
	return 0, io.EOF
}
func (t *fakeTty) WindowSize() (tcell.WindowSize, error) {
	return tcell.WindowSize{Width: t.w, Height: t.h}, nil
}

// BenchmarkHeatFrameTerminal is one live frame on tcell's real terminal
// screen (xterm-256color escapes, output discarded): a new row arrives and
// 200 rows of 100 slots scroll up.
func BenchmarkHeatFrameTerminal(b *testing.B) {
	b.Setenv("TERM", "xterm-256color")
	tty := newFakeTty(120, 203)
	s, err := tcell.NewTerminfoScreenFromTty(tty)
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Init(); err != nil {
		b.Fatal(err)
	}
	defer s.Fini()
	l := NewLive(s, HeatView{First: 0})
	rows := sampleRows(400, "")
	for _, r := range rows[:200] {
		l.Add(r, "status")
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		l.Add(rows[200+i%200], "status")
	}
}
