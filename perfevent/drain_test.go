package perfevent

import (
	"errors"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/loader"
)

// Drain blocks in poll without a tick (no periodic wake-ups), stop wakes
// it at once, and an error from fn ends it and reaches fail once.
func TestDrain(t *testing.T) {
	m := outputMap(t)
	rings, err := OpenOutputRings(m, "test", 1, WakeEach)
	if err != nil {
		t.Fatal(err)
	}
	defer rings.Close()

	calls := 0
	stop, err := rings.Drain(0, func() error { calls++; return nil }, func(err error) { t.Errorf("fail: %v", err) })
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	stop()
	stop()
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Errorf("stop took %v", d)
	}
	if calls != 0 {
		t.Errorf("fn ran %d times with no records and no tick", calls)
	}

	failed := make(chan error, 2)
	stop, err = rings.Drain(time.Millisecond, func() error { return errors.New("stdout closed") }, func(err error) { failed <- err })
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-failed:
		if err.Error() != "stdout closed" {
			t.Errorf("fail got %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("fn's error never reached fail")
	}
	stop()
	if len(failed) != 0 {
		t.Error("fail was called twice")
	}
}

// Close ends the rings' Drain before it unmaps them; a Drain whose fn is
// blocked (the run's ending hung, the watchdog closing the run under it)
// keeps the rings mapped, and its next Read does not fault.
func TestCloseUnderDrain(t *testing.T) {
	m := outputMap(t)
	for _, blocked := range []bool{false, true} {
		rings, err := OpenOutputRings(m, "test", 1, WakeEach)
		if err != nil {
			t.Fatal(err)
		}
		release, inFn := make(chan struct{}), make(chan struct{}, 1)
		stop, err := rings.Drain(time.Millisecond, func() error {
			select {
			case inFn <- struct{}{}:
			default:
			}
			if blocked {
				<-release
			}
			rings.Read(func(Sample) {})
			return nil
		}, func(err error) { t.Errorf("fail: %v", err) })
		if err != nil {
			t.Fatal(err)
		}
		<-inFn
		start := time.Now()
		if err := rings.Close(); err != nil {
			t.Error(err)
		}
		took := time.Since(start)
		if want := rings.mmaps != nil; want != blocked {
			t.Errorf("blocked %v: rings mapped after Close: %v", blocked, want)
		}
		if blocked && (took < drainWait || took > drainWait+time.Second) {
			t.Errorf("Close took %v under a blocked Drain, want %v", took, drainWait)
		}
		close(release) // its Read, after the Close: no fault
		stop()
	}
}

// outputMap is a perf event array for output rings, closed with the test.
func outputMap(t *testing.T) *ebpf.Map {
	t.Helper()
	privtest.Require(t)
	if err := loader.RemoveMemlock(); err != nil {
		t.Fatal(err)
	}
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.PerfEventArray})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// DrainDue waits as long as its fn says (the first wait as asked), a Wake
// calls fn at once, and a Wake after the stop is harmless.
func TestDrainDue(t *testing.T) {
	m := outputMap(t)
	rings, err := OpenOutputRings(m, "test", 1, WakeEach)
	if err != nil {
		t.Fatal(err)
	}
	defer rings.Close()

	calls := make(chan time.Time, 16)
	start := time.Now()
	stop, err := rings.DrainDue(300*time.Millisecond, func() (time.Duration, error) {
		calls <- time.Now()
		return 0, nil // then only a Wake
	}, func(err error) { t.Errorf("fail: %v", err) })
	if err != nil {
		t.Fatal(err)
	}
	select {
	case at := <-calls:
		if d := at.Sub(start); d < 300*time.Millisecond || d > 2*time.Second {
			t.Errorf("first call after %v, want 300 ms", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no call after the first wait")
	}
	select {
	case <-calls:
		t.Fatal("a call with no wait asked, no ring and no Wake")
	case <-time.After(500 * time.Millisecond):
	}
	woken := time.Now()
	rings.Wake()
	rings.Wake()
	select {
	case at := <-calls:
		if d := at.Sub(woken); d > time.Second {
			t.Errorf("call %v after the Wake", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no call after a Wake")
	}
	time.Sleep(100 * time.Millisecond)
	if n := len(calls); n > 1 {
		t.Errorf("%d more calls after two Wakes, want at most one", n)
	}
	stop()
	rings.Wake()
}
