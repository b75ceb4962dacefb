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
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("read the rings of %s: eventfd: %w", r.what, err)
	}
	pfds := []unix.PollFd{{Fd: int32(wake), Events: unix.POLLIN}}
	for _, fd := range r.events.FDs {
		pfds = append(pfds, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
	}
	timeout := -1
	if tick > 0 {
		timeout = int(tick.Milliseconds())
	}
	done := make(chan struct{})
	d := &drain{wake: wake, done: done}
	r.drain = d
	go func() {
		defer close(done)
		defer func() {
			if p := recover(); p != nil {
				fail(fmt.Errorf("internal error reading the rings of %s: %v", r.what, p))
			}
		}()
		for {
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
			if err := fn(); err != nil {
				fail(err)
				return
			}
		}
	}()
	return d.stop, nil
}

// drain is a Drain's goroutine: woken through wake to end, done once it
// has.
type drain struct {
	wake            int
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
	d.closeFD.Do(func() { unix.Close(d.wake) })
}

// ended asks the goroutine to end and says whether it did within wait.
// The eventfd stays open if not (a close under it could reach another
// file with the same number).
func (d *drain) ended(wait time.Duration) bool {
	d.ask()
	select {
	case <-d.done:
		d.closeFD.Do(func() { unix.Close(d.wake) })
		return true
	case <-time.After(wait):
		return false
	}
}
