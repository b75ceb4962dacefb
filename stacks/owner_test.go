package stacks

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
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

// The work due runs when the wait it asked for ends, not sooner and not
// at a tick: first after the first wait, then after each wait it returns,
// counted again from a reader's piece of work (which runs it at once).
// In a synctest bubble: the clock is the test's.
func TestOwnerDueOnTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var dues []time.Duration
		start := time.Now()
		o, stop := newOwner(50*time.Millisecond, nil, nil, func() (time.Duration, error) {
			dues = append(dues, time.Since(start))
			return time.Second, nil
		}, func(err error) { t.Errorf("fail: %v", err) })
		defer stop()
		// expect waits for the bubble to settle and wants n runs so far.
		expect := func(n int, when string) {
			t.Helper()
			synctest.Wait()
			var got int
			o.do(func() error { got = len(dues); return nil })
			if got != n {
				t.Fatalf("%d runs of the work due %s, want %d", got, when, n)
			}
		}
		time.Sleep(49 * time.Millisecond)
		expect(0, "before the first wait ended")
		time.Sleep(time.Millisecond)
		expect(1, "at the first wait's end")
		time.Sleep(500 * time.Millisecond)
		o.read(func() error { return nil }) // at 550 ms: due work at once, next at 1550 ms
		time.Sleep(999 * time.Millisecond)
		expect(2, "by 1549 ms (at 50 and 550 ms)")
		time.Sleep(time.Millisecond)
		expect(3, "by 1550 ms")
		var got []time.Duration
		o.do(func() error { got = dues; return nil })
		want := []time.Duration{50 * time.Millisecond, 550 * time.Millisecond, 1550 * time.Millisecond}
		if !slices.Equal(got, want) {
			t.Errorf("the work due ran at %v, want %v", got, want)
		}
	})
}
