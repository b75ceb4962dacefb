package run

import (
	"fmt"

	"github.com/gdamore/tcell/v2"
)

// LiveScreen takes the terminal full-screen for the rest of the run; the
// session's Close restores it, on every exit path (a panic included, which
// Main recovers). Every key and resize event goes to handle; when it
// returns true (q, Esc, Ctrl-C: raw mode turns Ctrl-C into a key) the run
// ends as on SIGINT, with its final report. open builds the view on the
// screen and returns that handler, before any event is read.
func (s *Session) LiveScreen(open func(tcell.Screen) (handle func(tcell.Event) (quit bool))) error {
	screen, err := tcell.NewScreen()
	if err != nil {
		return fmt.Errorf("open the terminal: %w (use --text for a stream)", err)
	}
	if err := screen.Init(); err != nil {
		return fmt.Errorf("open the terminal: %w (use --text for a stream)", err)
	}
	s.OnClose("restore the terminal", func() error { screen.Fini(); return nil })
	s.Quiet = true
	s.stdoutFD = -1 // the screen owns it
	handle := open(screen)
	s.Go("the live screen", func() {
		for {
			ev := screen.PollEvent()
			if ev == nil {
				return // Fini
			}
			if handle(ev) {
				s.Stop(nil)
				return
			}
		}
	})
	return nil
}
