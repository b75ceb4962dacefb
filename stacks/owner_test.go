package stacks

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// ownerProbe counts what an owner runs, and fails the test if two pieces
// ever run at once.
type ownerProbe struct {
	t      *testing.T
	inside atomic.Bool
	dues   int // touched only by the owner's goroutine: -race checks it
	loaded []parseResult
	failed chan error
	dueErr error
	dueRan chan struct{}
}

func (p *ownerProbe) enter() func() {
	if p.inside.Swap(true) {
		p.t.Error("two pieces of work ran at once")
	}
	return func() { p.inside.Store(false) }
}

func newOwnerProbe(t *testing.T, first time.Duration) (*ownerProbe, *owner, chan parseResult, func()) {
	p := &ownerProbe{t: t, failed: make(chan error, 4), dueRan: make(chan struct{}, 100)}
	results := make(chan parseResult, 2)
	o, stop := newOwner(first, results, func(res parseResult) {
		defer p.enter()()
		p.loaded = append(p.loaded, res)
	}, func() (time.Duration, error) {
		defer p.enter()()
		p.dues++
		select {
		case p.dueRan <- struct{}{}:
		default:
		}
		return time.Hour, p.dueErr
	}, func(err error) { p.failed <- err })
	return p, o, results, stop
}

// The owner does one piece of work at a time, whoever hands it over; a
// reader's is followed by the work due, a report's is not.
func TestOwnerSerializes(t *testing.T) {
	p, o, _, stop := newOwnerProbe(t, time.Hour)
	defer stop()
	n := 0 // the owner's alone
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				if err := o.read(func() error { defer p.enter()(); n++; return nil }); err != nil {
					t.Error(err)
				}
				if err := o.do(func() error { defer p.enter()(); n++; return nil }); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	var dues int
	if err := o.do(func() error { dues = p.dues; return nil }); err != nil {
		t.Fatal(err)
	}
	if n != 1600 || dues != 800 {
		t.Errorf("%d pieces of work, %d runs of the work due: want 1600 and 800 (one a read)", n, dues)
	}
}

// The work due runs when its time comes, and after a parser's table is
// taken in; a panic is an error of the piece that made it; an error of
// the work due ends the run once and the owner goes on serving.
func TestOwnerDueResultsAndErrors(t *testing.T) {
	p, o, results, stop := newOwnerProbe(t, time.Millisecond)
	select {
	case <-p.dueRan:
	case <-time.After(10 * time.Second):
		t.Fatal("the work due did not run when its first wait ended")
	}
	results <- parseResult{lane: laneBig}
	select {
	case <-p.dueRan:
	case <-time.After(10 * time.Second):
		t.Fatal("the work due did not run after a parser's result")
	}
	var loaded []parseResult
	if err := o.do(func() error { loaded = p.loaded; return nil }); err != nil || len(loaded) != 1 || loaded[0].lane != laneBig {
		t.Errorf("results taken in: %v (%v), want the one sent", loaded, err)
	}

	err := o.do(func() error { panic("a bad table") })
	if err == nil || !strings.Contains(err.Error(), "internal error: a bad table") {
		t.Errorf("a panic came back as %v", err)
	}

	o.do(func() error { p.dueErr = errors.New("drain failed"); return nil })
	for range 2 {
		if err := o.read(func() error { return nil }); err != nil {
			t.Errorf("a read whose due work failed: %v (the failure is the run's, through fail)", err)
		}
	}
	if err := <-p.failed; err.Error() != "drain failed" {
		t.Errorf("fail got %v", err)
	}
	select {
	case err := <-p.failed:
		t.Errorf("fail called again: %v", err)
	default:
	}

	stop()
	if err := o.do(func() error { t.Error("ran after stop"); return nil }); err != errOwnerEnded {
		t.Errorf("a call after stop: %v, want errOwnerEnded", err)
	}
}
