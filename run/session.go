package run

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	bpf "github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/hook"
	"github.com/tracekit/tracekit/internal/crash"
	"github.com/tracekit/tracekit/internal/usage"
	"github.com/tracekit/tracekit/kernel"
	"github.com/tracekit/tracekit/loader"
	"github.com/tracekit/tracekit/perfevent"
	"github.com/tracekit/tracekit/proctree"
	"github.com/tracekit/tracekit/tracefs"
)

// Session is a tool's run. It owns what the run creates (loaded programs
// and maps, attachments, probe events, perf events and rings, the -c
// command, the terminal): each is registered as it is created and closed
// once, in reverse order, on every exit path.
type Session struct {
	Tool   string
	Opts   *Common
	Stdout io.Writer
	Stderr io.Writer
	// Quiet drops the "Tracing ..." line (a full-screen view owns the
	// terminal).
	Quiet bool

	mu        sync.Mutex
	closers   []closer
	closed    bool
	closeDone chan struct{} // closed when the closing is over
	detachErr error         // what Detach's closers returned, for Close

	// ending is held while Detach or the closing runs closers: a closing
	// that comes during Detach (the watchdog's) waits for its probe events
	// to be removed before the tool may exit.
	ending sync.Mutex

	tracefsEvents bool // probe events registered in tracefs, removed at the end

	cmd           *Command
	commandStatus int // a -c command's status when it ended on its own
	reports       int

	stopOnce sync.Once
	stopc    chan struct{}
	stopErr  error

	stdoutFD int // polled for a reader that went away; -1 for none
	stdout   *trackedWriter

	// phase is the step of the ending under way, for the watchdog's
	// message when the ending takes too long (see watchStuck).
	phase atomic.Pointer[phase]
}

// phase is a step of a run's ending and when it began.
type phase struct {
	what  string
	start time.Time
}

func (s *Session) setPhase(format string, args ...any) {
	s.phase.Store(&phase{what: fmt.Sprintf(format, args...), start: time.Now()})
}

// phaseStart is when the step of the ending under way began (zero before
// the ending).
func (s *Session) phaseStart() time.Time {
	if p := s.phase.Load(); p != nil {
		return p.start
	}
	return time.Time{}
}

// Phase says which step of the ending is under way and for how long, ""
// before the ending.
func (s *Session) Phase() string {
	p := s.phase.Load()
	if p == nil {
		return ""
	}
	return fmt.Sprintf("%s, for %.1f s", p.what, time.Since(p.start).Seconds())
}

type closer struct {
	what  string
	close func() error
	// detach marks what ends the tracing (an attachment, a probe event):
	// Detach runs it before the final report.
	detach bool
}

// NewSession starts a run of tool writing to the process's stdout and
// stderr.
func NewSession(tool string, c *Common) *Session {
	s := &Session{Tool: tool, Opts: c, Stderr: os.Stderr, stopc: make(chan struct{}), stdoutFD: 1}
	s.stdout = &trackedWriter{w: os.Stdout}
	s.Stdout = s.stdout
	return s
}

// Go runs fn in a goroutine of its own. A panic there ends the run as an
// error would, through the same cleanup (Main's recover sees only the
// main goroutine's): probes removed, the terminal restored.
func (s *Session) Go(what string, fn func()) {
	go func() {
		defer func() {
			if p := recover(); p != nil {
				s.Stop(crash.Error("internal error in "+what, p))
			}
		}()
		fn()
	}()
}

// OnClose registers the undoing of something the run created; Close runs
// it. what names it in an error, "" where close's errors name it already.
// Registered after Close (a goroutine late to the end), it runs at once.
func (s *Session) OnClose(what string, close func() error) {
	s.register(closer{what: what, close: close})
}

// OnDetach registers the undoing of something that traces (an attachment
// of a program, a probe event): Detach runs it before the final report,
// Close if Detach did not. Maps and programs are OnClose's: the final
// report reads them.
func (s *Session) OnDetach(what string, close func() error) {
	s.register(closer{what: what, close: close, detach: true})
}

func (s *Session) register(c closer) {
	s.mu.Lock()
	if !s.closed {
		s.closers = append(s.closers, c)
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	_ = c.close()
}

// Detach ends the tracing before the final report: every attachment
// closed and every probe event removed (OnDetach), last first, the maps
// kept for the report to read. A report that then waits on a slow reader
// of stdout (a pager, a full pipe) keeps nothing of ours in the kernel's
// paths, and counts nothing that happened after the run's end. Close
// returns its errors. Twice, or after Close, is harmless.
func (s *Session) Detach() {
	s.ending.Lock()
	defer s.ending.Unlock()
	s.mu.Lock()
	var ds, keep []closer
	for _, c := range s.closers {
		if c.detach {
			ds = append(ds, c)
		} else {
			keep = append(keep, c)
		}
	}
	s.closers = keep
	s.mu.Unlock()
	errs := s.runClosers("detaching", ds)
	s.mu.Lock()
	s.detachErr = errors.Join(s.detachErr, errs)
	s.mu.Unlock()
}

// Close undoes everything registered, last first, each once, and joins
// the errors: one failure never keeps the rest open. Twice is harmless.
func (s *Session) Close() error {
	_, err := s.close()
	return err
}

// close is Close; first reports whether this call did the closing. A call
// while another closes waits for it to finish.
func (s *Session) close() (first bool, err error) {
	s.mu.Lock()
	if s.closed {
		done := s.closeDone
		s.mu.Unlock()
		<-done
		return false, nil
	}
	s.closed = true
	s.closeDone = make(chan struct{})
	defer close(s.closeDone)
	s.mu.Unlock()
	// A Detach under way finishes first (its closers are no longer in the
	// list); then nothing else can take closers from it.
	s.ending.Lock()
	defer s.ending.Unlock()
	s.mu.Lock()
	cs, detachErr := s.closers, s.detachErr
	s.closers = nil
	s.mu.Unlock()
	return true, errors.Join(detachErr, s.runClosers("closing", cs))
}

// runClosers runs cs last first, each once, and joins their errors: one
// failure never keeps the rest open. The phase says how far it got.
func (s *Session) runClosers(what string, cs []closer) error {
	var errs []error
	for i := len(cs) - 1; i >= 0; i-- {
		s.setPhase("%s: %d of %d done", what, len(cs)-1-i, len(cs))
		if err := cs[i].close(); err != nil {
			if cs[i].what != "" {
				err = fmt.Errorf("%s: %w", cs[i].what, err)
			}
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Load loads spec (see loader.Load) and closes the collection with the run.
func (s *Session) Load(spec *ebpf.CollectionSpec) (*ebpf.Collection, error) {
	coll, err := loader.Load(spec, s.Opts.Verbose)
	if err != nil {
		return nil, err
	}
	s.OnClose("unload programs", func() error { coll.Close(); return nil })
	return coll, nil
}

// AttachTracepoint attaches prog to group:name for the rest of the run: a
// raw tracepoint's program by the event's name (its link detaches without
// waiting, see proctree.Tree), others through perf.
func (s *Session) AttachTracepoint(prog *ebpf.Program, group, name string) error {
	if prog.Type() == ebpf.RawTracepoint {
		return s.AttachHook(prog, hook.Raw, group, name)
	}
	a, err := perfevent.AttachTracepoint(prog, group, name)
	if err != nil {
		return err
	}
	s.OnDetach("", a.Close) // "detach tracepoint x:y: ..."
	return nil
}

// TracepointBatch is AttachTracepoint for many tracepoints: those
// attached through the function it returns are detached together at the
// end of the run (perfevent.CloseAll). One after another, each detach
// waits out a grace period of its own: 360 syscall tracepoints took 23 s
// to detach, past a second SIGINT (issue 62).
func (s *Session) TracepointBatch() func(prog *ebpf.Program, group, name string) error {
	var mu sync.Mutex
	var cs []func() error
	s.OnDetach("", func() error {
		mu.Lock()
		defer mu.Unlock()
		// Said once it takes a while, so that the wait is not taken for
		// a hang (the kernel holds its lock through each grace period:
		// closing them at once saves a third, no more).
		slow := time.AfterFunc(time.Second, func() {
			fmt.Fprintf(s.Stderr, "%s: detaching %d tracepoints: the kernel waits out a grace period for each, about %v in all\n",
				s.Tool, len(cs), (time.Duration(len(cs)) * 45 * time.Millisecond).Round(time.Second))
		})
		defer slow.Stop()
		return perfevent.CloseAll(cs)
	})
	return func(prog *ebpf.Program, group, name string) error {
		if prog.Type() == ebpf.RawTracepoint {
			return s.AttachHook(prog, hook.Raw, group, name)
		}
		a, err := perfevent.AttachTracepoint(prog, group, name)
		if err != nil {
			return err
		}
		mu.Lock()
		cs = append(cs, a.Close)
		mu.Unlock()
		return nil
	}
}

// TreeOption is --max-tree, for the tools that follow -c's process tree.
// Tools embed it in their options.
type TreeOption struct {
	MaxTree uint32 `long:"max-tree" default:"8192" value-name:"N" description:"With -c: how many of the command's processes and threads are followed at once (up to 262144); the run says how many did not fit"`
}

// CheckTree validates --max-tree.
func (o *TreeOption) CheckTree() error {
	if o.MaxTree < 1 || o.MaxTree > proctree.MaxLimit {
		return usage.Errorf("--max-tree %d: from 1 to %d", o.MaxTree, proctree.MaxLimit)
	}
	return nil
}

// ProcessTree is the -c command's process tree on this kernel (see
// proctree.New): followed by raw tracepoints' programs where they load.
func (s *Session) ProcessTree(ns *asm.PidNS, max uint32) (*proctree.Tree, error) {
	var read bpf.BuiltinFunc
	if hook.HaveRawTracepoints() {
		read = kernel.Readers().Kernel
	}
	return proctree.New(s.CommandPid(), s.CommandShell(), ns, max, read)
}

// FollowProcessTree follows the -c command and its descendants in the
// map proctree.Add made (see proctree.Follow) for the rest of the run.
// When the run ends, children that did not fit in the map are reported
// on stderr.
func (s *Session) FollowProcessTree(coll *ebpf.Collection) error {
	if err := proctree.Follow(coll, s.AttachTracepoint); err != nil {
		return err
	}
	s.OnClose("", func() error {
		if n, room := proctree.Unfollowed(coll); n > 0 {
			fmt.Fprintf(s.Stderr, "%s: %d of the command's processes were not followed: more than %d ran at once (--max-tree), and their events are missing\n", s.Tool, n, room)
		}
		if forks, exits := proctree.Skipped(coll); forks+exits > 0 {
			fmt.Fprintf(s.Stderr, "%s: the kernel skipped following the command's processes %d times (preempted mid-run on a CPU that the next event then reached): %d forks or execs not seen, their processes' events are missing; %d exits not seen\n", s.Tool, forks+exits, forks, exits)
		}
		return nil
	})
	return nil
}

// AttachHook attaches prog to the tracepoint group:name by h (see
// hook.Attach) for the rest of the run.
func (s *Session) AttachHook(prog *ebpf.Program, h hook.Hook, group, name string) error {
	a, err := hook.Attach(prog, h, group, name)
	if err != nil {
		return err
	}
	s.OnDetach("", a.Close) // "detach ..."
	return nil
}

// AttachProbe attaches prog to a kprobe or uprobe for the rest of the run
// (see AttachProbe).
func (s *Session) AttachProbe(prog *ebpf.Program, p tracefs.Probe, legacy bool) error {
	a, err := perfevent.AttachProbe(prog, p, s.Tool, legacy)
	if err != nil {
		return err
	}
	s.tracefsEvents = s.tracefsEvents || legacy
	s.OnDetach("", a.Close) // "detach tracepoint x:y: ..."
	return nil
}

// ProbeSet is a program and the uprobes it runs at.
type ProbeSet struct {
	Prog   *ebpf.Program
	Probes []tracefs.Probe
}

// AttachUprobes attaches each set's program to its uprobes for the rest of
// the run: as one link per set where multi (perfevent.UprobeMulti, and the
// programs were loaded for it), else a perf event per probe. The run's end
// closes them all at once (perfevent.CloseAll).
func (s *Session) AttachUprobes(sets []ProbeSet, multi bool) error {
	var cs []func() error
	for _, set := range sets {
		if multi {
			l, err := perfevent.AttachUprobeMulti(set.Prog, set.Probes)
			if err != nil {
				return errors.Join(err, perfevent.CloseAll(cs))
			}
			cs = append(cs, l.Close)
			continue
		}
		for _, p := range set.Probes {
			a, err := perfevent.AttachProbe(set.Prog, p, s.Tool, false)
			if err != nil {
				return errors.Join(err, perfevent.CloseAll(cs))
			}
			cs = append(cs, a.Close)
		}
	}
	if multi {
		s.OnDetach("", func() error { return perfevent.CloseAll(cs) })
	} else {
		s.OnDetach("", func() error { return s.closeProbes(cs) })
	}
	return nil
}

// closeProbes closes the perf events of probes, one at a time as the
// kernel does whatever we do, and says so when that runs past a second:
// before 6.6 (no uprobe_multi) each waits out an RCU grace period.
func (s *Session) closeProbes(cs []func() error) error {
	start := time.Now()
	told := false
	var errs []error
	for i, c := range cs {
		errs = append(errs, c())
		left := len(cs) - i - 1
		if told || left == 0 || time.Since(start) <= time.Second {
			continue
		}
		// Said once, and only when what is left takes a second more:
		// "1 more, about 0s" said nothing.
		if rest := time.Since(start) / time.Duration(i+1) * time.Duration(left); rest >= time.Second {
			told = true
			fmt.Fprintf(s.Stderr, "%s: detaching %d more uprobes, about %v: the kernel waits out a grace period for each probe's perf event (uprobe_multi links, Linux 6.6+, detach them at once)\n",
				s.Tool, left, rest.Round(time.Second))
		}
	}
	return errors.Join(errs...)
}

// ProbeEvent registers a probe event in tracefs for the rest of the run.
func (s *Session) ProbeEvent(p tracefs.Probe) (*perfevent.ProbeEvent, error) {
	e, err := perfevent.NewProbeEvent(s.Tool, p)
	if err != nil {
		return nil, err
	}
	s.tracefsEvents = true
	s.OnDetach("remove "+e.Name(), e.Close)
	return e, nil
}

// OpenRings opens per-CPU ring buffers of event id for the rest of the run.
func (s *Session) OpenRings(prog *ebpf.Program, what string, id uint64, pages int, wake perfevent.RingWake) (*perfevent.Rings, error) {
	return s.rings(perfevent.OpenRings(prog, what, id, pages, wake))
}

// OpenOutputRings is perfevent.OpenOutputRings, closed with the session.
func (s *Session) OpenOutputRings(events *ebpf.Map, what string, pages int, wake perfevent.RingWake) (*perfevent.Rings, error) {
	return s.rings(perfevent.OpenOutputRings(events, what, pages, wake))
}

func (s *Session) rings(r *perfevent.Rings, err error) (*perfevent.Rings, error) {
	if err != nil {
		return nil, err
	}
	s.OnClose("", r.Close) // "close x: ..."
	return r, nil
}

// startCommand starts the -c command, if there is one, held at its gate:
// Loop releases it. Closing the session ends it if it still runs.
func (s *Session) startCommand() error {
	if s.Opts.Command == "" {
		return nil
	}
	out := os.Stdout
	if s.Opts.JSON {
		out = os.Stderr // stdout carries JSON only
	}
	c, err := StartCommand(s.Opts.Command, out)
	if err != nil {
		return err
	}
	s.cmd = c
	s.OnClose("", c.Stop)
	return nil
}

// CommandPid is the pid of the -c command (held until Loop), 0 without -c.
func (s *Session) CommandPid() int {
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Pid()
}

// CommandShell reports whether the -c command runs in a shell (its line
// has shell syntax: see CommandArgv), which then waits for its children's
// execs, uncounted.
func (s *Session) CommandShell() bool {
	_, shell := CommandArgv(s.Opts.Command)
	return shell
}

// Stop ends Loop from any goroutine: with nil as Ctrl-C does (the final
// report is printed), with an error at once, returning it.
func (s *Session) Stop(err error) {
	s.stopOnce.Do(func() {
		s.stopErr = err
		close(s.stopc)
	})
}

// ErrStdoutClosed ends a run whose reader went away ("tool | head -1").
var ErrStdoutClosed = errors.New("stdout was closed")

// stdoutPoll is how often Loop looks for a closed stdout.
const stdoutPoll = 200 * time.Millisecond

// stdoutClosed reports whether fd is a pipe (or socket, or terminal) whose
// other end went away: poll reports POLLERR or POLLHUP whatever the events
// asked for.
func stdoutClosed(fd int) bool {
	if fd < 0 {
		return false
	}
	pfd := []unix.PollFd{{Fd: int32(fd)}}
	n, err := unix.Poll(pfd, 0)
	return err == nil && n > 0 && pfd[0].Revents&(unix.POLLERR|unix.POLLHUP) != 0
}

// minGarbage is the runtime's smallest heap goal (GOGC=100): a setup
// that allocated less has not been collected, and leaves little.
const minGarbage = 4 << 20

// allocated is the bytes the process has allocated on its heap so far.
func allocated() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return minGarbage // unknown: collect
	}
	return s[0].Value.Uint64()
}

// Loop releases the -c command and prints reports until ctx is done, the
// command exits, Stop is called, stdout is closed, or count reports were
// printed; then it ends the command's tree and the tracing (Detach) and
// prints the final report. report(final) writes one report; final is true
// for the last one.
func (s *Session) Loop(ctx context.Context, what string, report func(final bool) error) error {
	// Collect the garbage of the setup (kallsyms, BTF, formats) and hand
	// the memory back now, not while the programs run: a collection, or the
	// background scavenger's madvise calls, during tracing compete with the
	// traced workload (seen as 4x dropmon's cost per drop in make bench).
	// A setup that allocated less than the runtime's smallest heap goal
	// left nothing worth a collection (a bpftrace one-liner: 0.4 MB, where
	// the collection was 8% of its CPU to the first event).
	if allocated() >= minGarbage {
		debug.FreeOSMemory()
	}
	var done <-chan struct{}
	switch {
	case s.cmd != nil:
		// A signal (or Stop) that came during the setup: the command never
		// runs, and there is nothing to report.
		select {
		case <-ctx.Done():
			return nil
		case <-s.stopc:
			return s.stopErr
		default:
		}
		if err := s.cmd.Release(); err != nil {
			return err
		}
		done = s.cmd.Done()
		// However the loop ends, the command ends with it, while the
		// programs are still attached: closing the session takes a while
		// (detaching, freeing maps), and the command must not run on
		// untraced meanwhile. Ended before the final report, its last
		// moments are in it.
		defer s.cmd.Stop()
	case s.Quiet:
	case s.Opts.interval == 0:
		fmt.Fprintf(s.Stderr, "Tracing %s... Hit Ctrl-C to end.\n", what)
	default:
		fmt.Fprintf(s.Stderr, "Tracing %s... Hit Ctrl-C to end; a report every %v.\n", what, s.Opts.interval)
	}
	var tick <-chan time.Time
	if s.Opts.interval > 0 {
		t := time.NewTicker(s.Opts.interval)
		defer t.Stop()
		tick = t.C
	}
	watch := time.NewTicker(stdoutPoll)
	defer watch.Stop()
	// The final report: the command's tree ended while it is still
	// traced, then the tracing ended (Detach), then the report, which may
	// wait on its reader (a pager) as long as the reader likes.
	final := func() error {
		if s.cmd != nil {
			s.setPhase("ending the command")
			if err := s.cmd.Stop(); err != nil {
				return err
			}
		}
		s.Detach()
		s.setPhase("the final report")
		return report(true)
	}
	for n := 0; ; {
		select {
		case <-ctx.Done():
			return final()
		case <-s.stopc:
			if s.stopErr != nil {
				return s.stopErr
			}
			return final()
		case <-done:
			s.commandStatus = s.cmd.Status()
			return final() // what the command left running ends too
		case <-watch.C:
			if stdoutClosed(s.stdoutFD) {
				return ErrStdoutClosed
			}
		case <-tick:
			n++
			if s.Opts.count > 0 && n >= s.Opts.count {
				return final()
			}
			if err := report(false); err != nil {
				return err
			}
		}
	}
}

// trackedWriter notes when a write began that has not returned yet: the
// watchdog tells a stdout nobody reads from a final report that is merely
// slow (ten thousand rows on a slow machine).
type trackedWriter struct {
	w     io.Writer
	since atomic.Int64 // unix ns of the write under way, 0 for none
}

func (t *trackedWriter) Write(p []byte) (int, error) {
	t.since.Store(time.Now().UnixNano())
	defer t.since.Store(0)
	return t.w.Write(p)
}

// blockedFor is how long the write to stdout under way has waited, 0 when
// none is.
func (t *trackedWriter) blockedFor(now time.Time) time.Duration {
	if t == nil {
		return 0
	}
	if since := t.since.Load(); since != 0 {
		return now.Sub(time.Unix(0, since))
	}
	return 0
}

// Every runs fn every d until the session closes (before what was
// registered with OnClose earlier: the maps fn reads). An error from fn
// stops the session with it.
func (s *Session) Every(what string, d time.Duration, fn func() error) {
	stop, done := make(chan struct{}), make(chan struct{})
	s.Go(what, func() {
		defer close(done)
		tick := time.NewTicker(d)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if err := fn(); err != nil {
					s.Stop(err)
					return
				}
			}
		}
	})
	s.OnClose("", func() error { close(stop); <-done; return nil })
}
