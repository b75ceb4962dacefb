package stacks

import (
	"errors"
	"time"

	"github.com/tracekit/tracekit/internal/crash"
)

// owner is the one goroutine that owns a run's state: the processes and
// their tables, the deferred samples, the counts held. The rings'
// readers and the report loop hand it their work (do, read), the parsers
// their tables (results); it does one piece at a time, in the order it
// came. Between pieces it does the work due at times of its own (due: a
// rescan, a deferred sample's deadline, the counts' drain), which says
// how long it may wait before it is due again. Nothing it owns is touched
// from another goroutine, so nothing it owns needs a lock.
type owner struct {
	calls   chan call
	results <-chan parseResult
	loaded  func(parseResult)             // a parser's table, taken in
	due     func() (time.Duration, error) // the work due; how long until more is
	fail    func(error)                   // an error of the work due: the run ends
	quit    chan struct{}
	done    chan struct{}
}

// call is a piece of work handed to the owner; then says whether the
// work due follows it (a reader's: what it read may make work due).
type call struct {
	fn   func() error
	then bool
	err  chan error
}

// errOwnerEnded is what a call gets once the owner has ended (the run is
// closing: a reader's last wake-up).
var errOwnerEnded = errors.New("the run's owner has ended")

// newOwner starts the owner; its due work first runs after first. stop
// ends it (after the work at hand) and waits for it.
func newOwner(first time.Duration, results <-chan parseResult, loaded func(parseResult), due func() (time.Duration, error), fail func(error)) (o *owner, stop func()) {
	o = &owner{calls: make(chan call), results: results, loaded: loaded, due: due, fail: fail, quit: make(chan struct{}), done: make(chan struct{})}
	go o.run(first)
	return o, func() {
		close(o.quit)
		<-o.done
	}
}

func (o *owner) run(first time.Duration) {
	defer close(o.done)
	timer := time.NewTimer(first)
	defer timer.Stop()
	failed := false
	// dueWork runs the due work and sets the timer for the next; an error
	// ends the run (fail), once, and the owner goes on serving calls (the
	// run's own ending, a reader's last read) until it is stopped.
	dueWork := func() {
		if failed {
			return
		}
		var wait time.Duration
		err := protect(func() (err error) {
			wait, err = o.due()
			return err
		})
		if err != nil {
			failed = true
			o.fail(err)
			return
		}
		timer.Reset(wait)
	}
	for {
		select {
		case <-o.quit:
			return
		case c := <-o.calls:
			err := protect(c.fn)
			if err == nil && c.then {
				dueWork()
			}
			c.err <- err
		case res := <-o.results:
			if err := protect(func() error { o.loaded(res); return nil }); err != nil && !failed {
				failed = true
				o.fail(err)
			}
			dueWork()
		case <-timer.C:
			dueWork()
		}
	}
}

// do has the owner run fn, and returns its error (errOwnerEnded if the
// owner has ended).
func (o *owner) do(fn func() error) error { return o.send(call{fn: fn}) }

// read has the owner run fn, a reader's, then the work due.
func (o *owner) read(fn func() error) error { return o.send(call{fn: fn, then: true}) }

func (o *owner) send(c call) error {
	c.err = make(chan error, 1)
	select {
	case o.calls <- c:
	case <-o.done:
		return errOwnerEnded
	}
	return <-c.err // the owner answers every call it takes
}

// protect runs fn; a panic in it is its error (the run ends through its
// usual cleanup, never with probes left behind).
func protect(fn func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = crash.Error("internal error", p)
		}
	}()
	return fn()
}
