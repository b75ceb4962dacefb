package perfevent

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Drain reads the rings in a goroutine of its own until the returned stop
// is called. It waits in poll(2) until a ring wakes it or tick passes (a
// trickle of records under WakeBatch shows within tick; 0 waits for
// records alone), then calls fn, which reads them (Read). stop wakes it at
// once, through an eventfd in the same poll, and returns when it has
// ended; twice is harmless. A poll error, an error from fn or a panic in
// fn ends the goroutine and is handed to fail, once: the run ends through
// its usual cleanup, never with probes left behind.
func (r *Rings) Drain(tick time.Duration, fn func() error, fail func(error)) (stop func(), err error) {
	return r.DrainDue(tick, func() (time.Duration, error) { return tick, fn() }, fail)
}

// DrainDue is Drain for a reader with work due at times of its own (a
// rescan, a deadline): fn returns how long the goroutine may wait before
// it calls fn again (0: until a ring or Wake wakes it), wait is the first
// such wait. Such a reader wakes for its work alone, not at a fixed tick.
func (r *Rings) DrainDue(wait time.Duration, fn func() (time.Duration, error), fail func(error)) (stop func(), err error) {
	var fds [2]int
	for i := range fds {
		if fds[i], err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
			if i == 1 {
				unix.Close(fds[0])
			}
			return nil, fmt.Errorf("read the rings of %s: eventfd: %w", r.what, err)
		}
	}
	pfds := []unix.PollFd{{Fd: int32(fds[0]), Events: unix.POLLIN}, {Fd: int32(fds[1]), Events: unix.POLLIN}}
	for _, fd := range r.events.FDs {
		pfds = append(pfds, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
	}
	done := make(chan struct{})
	d := &drain{wake: fds[0], poke: fds[1], done: done}
	r.drain = d
	go func() {
		defer close(done)
		defer func() {
			if p := recover(); p != nil {
				fail(fmt.Errorf("internal error reading the rings of %s: %v", r.what, p))
			}
		}()
		var count [8]byte
		for {
			timeout := -1
			if wait > 0 {
				// Rounded up: woken before it, fn would find nothing due.
				timeout = int((wait + time.Millisecond - 1) / time.Millisecond)
			}
			_, err := unix.Poll(pfds, timeout)
			if errors.Is(err, unix.EINTR) {
				continue // a signal (the runtime's preemption): nothing to read
			}
			if err != nil {
				fail(fmt.Errorf("poll the rings of %s: %w", r.what, err))
				return
			}
			if pfds[0].Revents != 0 {
				return // stop
			}
			if pfds[1].Revents != 0 {
				unix.Read(d.poke, count[:]) // reset: one call answers every Wake before it
			}
			if wait, err = fn(); err != nil {
				fail(err)
				return
			}
		}
	}()
	return d.stop, nil
}

// Wake makes the rings' DrainDue call its fn at once (work came from
// elsewhere than the rings: a parser's result). Any goroutine may call it
// once DrainDue has returned; harmless once the drain has ended.
func (r *Rings) Wake() {
	if d := r.drain; d != nil {
		d.mu.Lock()
		if !d.closed {
			unix.Write(d.poke, []byte{1, 0, 0, 0, 0, 0, 0, 0})
		}
		d.mu.Unlock()
	}
}

// drain is a Drain's goroutine: woken through wake to end, through poke
// to call its fn (Wake), done once it has ended.
type drain struct {
	wake, poke      int
	mu              sync.Mutex // Wake against close: never a write to a number reused
	closed          bool
	done            chan struct{}
	signal, closeFD sync.Once
}

// ask wakes the goroutine to end.
func (d *drain) ask() {
	d.signal.Do(func() { unix.Write(d.wake, []byte{1, 0, 0, 0, 0, 0, 0, 0}) })
}

// stop ends the goroutine and waits for it.
func (d *drain) stop() {
	d.ask()
	<-d.done
	d.closeFD.Do(d.close)
}

func (d *drain) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	unix.Close(d.wake)
	unix.Close(d.poke)
}

// ended asks the goroutine to end and says whether it did within wait.
// The eventfd stays open if not (a close under it could reach another
// file with the same number).
func (d *drain) ended(wait time.Duration) bool {
	d.ask()
	select {
	case <-d.done:
		d.closeFD.Do(d.close)
		return true
	case <-time.After(wait):
		return false
	}
}
