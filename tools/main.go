package tools

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	flags "github.com/jessevdk/go-flags"
)

// Common holds the options every tool shares (REFERENCE.md, output
// contract). Tools embed it in their own options struct.
type Common struct {
	Cumulative bool   `long:"cumulative" description:"Keep counting across interval reports instead of clearing the counts after each"`
	Command    string `short:"c" long:"command" value-name:"CMD" description:"Run /bin/sh -c CMD once tracing is attached, trace while it runs, report when it exits"`
	JSON       bool   `long:"json" description:"Print one JSON object per report on stdout; every other message goes to stderr"`
	Timestamp  bool   `short:"T" long:"timestamp" description:"Print the time (HH:MM:SS) above each text report"`
	Args       struct {
		Interval string `positional-arg-name:"interval" description:"Seconds between reports; without it, one report at the end"`
		Count    string `positional-arg-name:"count" description:"Number of reports to print before exiting"`
	} `positional-args:"yes"`
	rest []string // arguments beyond the positional ones

	interval time.Duration
	count    int
	lead     string
}

// Lead is the leading positional argument of a tool with Tool.Lead set.
func (c *Common) Lead() string { return c.lead }

// CommonOptions gives a tool's options struct access to the shared part.
type CommonOptions interface {
	common() *Common
}

func (c *Common) common() *Common { return c }

// Interval is the time between reports, 0 for one report at the end.
func (c *Common) Interval() time.Duration { return c.interval }

// DefaultInterval sets the interval when none was given (the heatmap's
// rows are one interval each).
func (c *Common) DefaultInterval(d time.Duration) {
	if c.interval == 0 {
		c.interval = d
	}
}

// UsageError is a bad flag or argument: exit status 2, with a hint.
type UsageError struct{ msg string }

func (e *UsageError) Error() string { return e.msg }

// Usagef builds a UsageError.
func Usagef(format string, args ...any) error {
	return &UsageError{msg: fmt.Sprintf(format, args...)}
}

func (c *Common) validate() error {
	a := c.Args
	if len(c.rest) > 0 {
		return Usagef("unexpected argument %q: the arguments are [interval [count]]", c.rest[0])
	}
	if a.Interval != "" {
		secs, err := strconv.ParseFloat(a.Interval, 64)
		if err != nil || secs <= 0 || secs > 1e6 {
			return Usagef("invalid interval %q: want a positive number of seconds", a.Interval)
		}
		c.interval = time.Duration(secs * float64(time.Second))
	}
	if a.Count != "" {
		n, err := strconv.Atoi(a.Count)
		if err != nil || n <= 0 {
			return Usagef("invalid count %q: want a positive whole number of reports", a.Count)
		}
		c.count = n
	}
	return nil
}

// Tool describes one command-line tool for Main.
type Tool struct {
	Name string
	// Lead names a required positional argument before [interval [count]]
	// ("EVENT"), "" for none.
	Lead string
	// Summary is the first line of --help; Details follows the options
	// (examples, notes).
	Summary, Details string
	// Options is a pointer to the tool's options struct, which embeds Common.
	Options CommonOptions
	// Validate checks tool-specific options after parsing; return Usagef
	// errors for bad input.
	Validate func() error
	// Run traces until ctx is done, the -c command exits or count reports
	// were printed.
	Run func(ctx context.Context, s *Session) error
}

// Main parses args, runs the tool and turns its error into one line on
// stderr and an exit status: 0 success, 1 runtime error, 2 usage error. It is
// the only place that prints errors; every deferred cleanup in Run has run
// by the time it prints.
func Main(t Tool, args []string) (status int) {
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(os.Stderr, "%s: internal error: %v\n", t.Name, r)
			status = 1
		}
	}()
	usage := func(err error) int {
		fmt.Fprintf(os.Stderr, "%s: %v\nTry '%s --help' for more information.\n", t.Name, err, t.Name)
		return 2
	}
	if err := parse(t, args); err != nil {
		var fe *flags.Error
		if errors.As(err, &fe) && fe.Type == flags.ErrHelp {
			fmt.Fprint(os.Stdout, fe.Message)
			return 0
		}
		return usage(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// A closed stdout must end in an error return, which detaches and
	// removes everything, not in a SIGPIPE death, which removes nothing.
	signal.Ignore(syscall.SIGPIPE)
	if os.Geteuid() == 0 {
		// Probes left by a toolkit process killed with SIGKILL: best effort.
		_ = SweepStaleProbes()
	}
	s := newSession(t.Name, t.Options.common())
	err := t.Run(ctx, s)
	if err == nil {
		return 0
	}
	var ue *UsageError
	if errors.As(err, &ue) {
		return usage(err)
	}
	fmt.Fprintf(os.Stderr, "%s: %v\n", t.Name, err)
	return 1
}

func parse(t Tool, args []string) error {
	// A fresh parser per call: tests share no state.
	p := flags.NewNamedParser(t.Name, flags.HelpFlag|flags.PassDoubleDash)
	// go-flags appends the positional arguments: "[interval] [count]".
	p.Usage = "[options]"
	if t.Lead != "" {
		p.Usage = "[options] " + t.Lead
	}
	p.ShortDescription = t.Summary
	p.LongDescription = t.Summary
	if _, err := p.AddGroup("Options", "", t.Options); err != nil {
		return fmt.Errorf("options: %w", err)
	}
	rest, err := p.ParseArgs(args)
	if err != nil {
		var fe *flags.Error
		if errors.As(err, &fe) && fe.Type == flags.ErrHelp {
			var b strings.Builder
			p.WriteHelp(&b)
			fe.Message = b.String() + "\n" + t.Details
			return fe
		}
		return err
	}
	c := t.Options.common()
	c.rest = rest
	if t.Lead != "" {
		// The first positional is the lead: shift the others down.
		a := &c.Args
		if a.Interval == "" {
			return Usagef("missing %s", t.Lead)
		}
		c.lead, a.Interval, a.Count = a.Interval, a.Count, ""
		if len(c.rest) > 0 {
			a.Count, c.rest = c.rest[0], c.rest[1:]
		}
	}
	if err := t.Options.common().validate(); err != nil {
		return err
	}
	if t.Validate != nil {
		return t.Validate()
	}
	return nil
}

// Session is a tool's run: where reports go, the -c command, the loop.
type Session struct {
	Tool    string
	Opts    *Common
	Stdout  io.Writer
	Stderr  io.Writer
	cmd     *Command
	reports int
	// Quiet drops the "Tracing ..." line (a full-screen view owns the
	// terminal).
	Quiet bool
}

func newSession(tool string, c *Common) *Session {
	return &Session{Tool: tool, Opts: c, Stdout: os.Stdout, Stderr: os.Stderr}
}

// PrepareCommand starts the -c command held back, if there is one, and
// returns its pid (0 without -c). Call it before building programs that
// filter on the pid; Loop releases the command. The returned cleanup kills a
// command that was never released.
func (s *Session) PrepareCommand() (pid int, cleanup func(), err error) {
	if s.Opts.Command == "" {
		return 0, func() {}, nil
	}
	out := io.Writer(os.Stdout)
	if s.Opts.JSON {
		out = os.Stderr // stdout carries JSON only
	}
	c, err := StartCommand(s.Opts.Command, out)
	if err != nil {
		return 0, nil, err
	}
	s.cmd = c
	return c.Pid(), func() {
		if s.cmd != nil {
			s.cmd.Abort()
		}
	}, nil
}

// Loop prints reports until ctx is done, the -c command exits or count
// reports were printed; then it prints the final report. report(final)
// writes one report; final is true for the last one.
func (s *Session) Loop(ctx context.Context, what string, report func(final bool) error) error {
	// Collect the garbage of the setup (kallsyms, BTF, formats) and hand
	// the memory back now, not while the programs run: a collection, or the
	// background scavenger's madvise calls, during tracing compete with the
	// traced workload (seen as 4x dropmon's cost per drop in make bench).
	debug.FreeOSMemory()
	var done <-chan struct{}
	if s.cmd != nil {
		c := s.cmd
		if err := c.Release(); err != nil {
			return err
		}
		s.cmd = nil // released: no longer ours to kill
		done = c.Done()
	} else if s.Quiet {
	} else if s.Opts.interval == 0 {
		fmt.Fprintf(s.Stderr, "Tracing %s... Hit Ctrl-C to end.\n", what)
	} else {
		fmt.Fprintf(s.Stderr, "Tracing %s... Hit Ctrl-C to end; a report every %v.\n", what, s.Opts.interval)
	}
	var tick <-chan time.Time
	if s.Opts.interval > 0 {
		t := time.NewTicker(s.Opts.interval)
		defer t.Stop()
		tick = t.C
	}
	for n := 0; ; {
		select {
		case <-ctx.Done():
			return report(true)
		case <-done:
			return report(true)
		case <-tick:
			n++
			if s.Opts.count > 0 && n >= s.Opts.count {
				return report(true)
			}
			if err := report(false); err != nil {
				return err
			}
		}
	}
}
