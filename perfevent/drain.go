package perfevent

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tracekit/tracekit/internal/crash"
	"golang.org/x/sys/unix"
)

// Drain reads the rings in a goroutine of its own until the returned stop
// is called. It waits (in Go's network poller: see pollSet) until a ring
// wakes it or tick passes (a trickle of records under WakeBatch shows
// within tick; 0 waits for records alone), then calls fn, which reads
// them (Read). stop wakes it at once, through an eventfd in the same set,
// and returns when it has ended; twice is harmless. A poll error, an
// error from fn or a panic in fn ends the goroutine and is handed to
// fail, once: the run ends through its usual cleanup, never with probes
// left behind.
func (r *Rings) Drain(tick time.Duration, fn func() error, fail func(error)) (stop func(), err error) {
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("read the rings of %s: eventfd: %w", r.what, err)
	}
	ep, err := newPollSet(append([]int{wake}, r.events.FDs...))
	if err != nil {
		unix.Close(wake)
		return nil, fmt.Errorf("read the rings of %s: %w", r.what, err)
	}
	done := make(chan struct{})
	d := &drain{wake: wake, set: ep.fd, done: done}
	r.drain = d
	go func() {
		defer close(done)
		defer ep.Close()
		defer func() {
			if p := recover(); p != nil {
				fail(crash.Error("internal error reading the rings of "+r.what, p))
			}
		}()
		ready := func() bool { return d.stopping.Load() || r.unread() }
		for {
			if err := ep.wait(tick, ready); err != nil {
				fail(fmt.Errorf("poll the rings of %s: %w", r.what, err))
				return
			}
			if d.stopping.Load() {
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
// has ended.
type drain struct {
	wake            int
	stopping        atomic.Bool // set before wake is written
	set             int         // the epoll set's descriptor (tests)
	done            chan struct{}
	signal, closeFD sync.Once
}

// ask wakes the goroutine to end.
func (d *drain) ask() {
	d.signal.Do(func() {
		d.stopping.Store(true)
		unix.Write(d.wake, []byte{1, 0, 0, 0, 0, 0, 0, 0})
	})
}

// stop ends the goroutine and waits for it.
func (d *drain) stop() {
	d.ask()
	<-d.done
	d.closeFD.Do(d.close)
}

func (d *drain) close() { unix.Close(d.wake) }

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

// pollSet is an epoll set of the rings and eventfds, itself waited on in
// Go's network poller: a reader waiting for its rings holds no P (a
// thread blocked in poll(2) kept Go's sysmon polling every 20 µs until it
// took the P back, and woke it again at each of the reader's wake-ups).
type pollSet struct {
	fd int // never f.Fd(), which would make f blocking, without deadlines
	f  *os.File
	rc syscall.RawConn
}

func newPollSet(fds []int) (*pollSet, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	for _, fd := range fds {
		if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}); err != nil {
			unix.Close(epfd)
			return nil, fmt.Errorf("epoll_ctl: %w", err)
		}
	}
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("epoll set nonblocking: %w", err)
	}
	f := os.NewFile(uintptr(epfd), "rings")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &pollSet{fd: epfd, f: f, rc: rc}, nil
}

// wait returns when ready says there is work, waiting at most wait for
// it (0: as long as it takes). ready is asked first, then at each wake-up
// of the set: it must look at the rings themselves (their heads), not at
// what epoll_wait(2) says of them, since a perf event's poll answers
// once per wake-up and the poller's check of the set has taken it.
func (p *pollSet) wait(wait time.Duration, ready func() bool) error {
	deadline := time.Time{}
	if wait > 0 {
		deadline = time.Now().Add(wait)
	}
	if err := p.f.SetReadDeadline(deadline); err != nil {
		return err
	}
	err := p.rc.Read(func(uintptr) bool { return ready() })
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return nil
	}
	return err
}

func (p *pollSet) Close() error { return p.f.Close() }
