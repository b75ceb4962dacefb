package run

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"regexp"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	flags "github.com/jessevdk/go-flags"

	"github.com/tracekit/tracekit/internal/crash"
	"github.com/tracekit/tracekit/internal/usage"
	"github.com/tracekit/tracekit/kernel"
	"github.com/tracekit/tracekit/perfevent"
	"github.com/tracekit/tracekit/terminal"
)

// Common holds the options every tool shares (REFERENCE.md, output
// contract). Tools embed it in their own options struct.
type Common struct {
	Cumulative bool   `long:"cumulative" description:"Keep counting across interval reports instead of clearing the counts after each"`
	Command    string `short:"c" long:"command" value-name:"CMD" unquote:"false" description:"Run CMD once tracing is attached (its words as they are, or by /bin/sh -c when it has shell syntax), trace while it runs, report when it exits; the words after -- are taken the same way, as perf takes them"`
	JSON       bool   `long:"json" description:"Print one JSON object per report on stdout; every other message goes to stderr"`
	Timestamp  bool   `short:"T" long:"timestamp" description:"Print the time (HH:MM:SS) above each text report"`
	Verbose    bool   `long:"verbose" description:"When the kernel's verifier rejects a program, print its whole log and the program (else its last lines)"`
	Version    bool   `long:"version" description:"Print the toolkit's version, its commit and the Go version it was built with, and exit"`
	Args       struct {
		Interval string `positional-arg-name:"interval" description:"Seconds between reports; without it, one report at the end"`
		Count    string `positional-arg-name:"count" description:"Number of reports to print before exiting"`
	} `positional-args:"yes"`
	rest []string // arguments beyond the positional ones
	// script holds a Script tool's arguments after its script
	script []string

	interval time.Duration
	count    int
	lead     string
}

// Lead is the leading positional argument of a tool with Tool.Lead set.
func (c *Common) Lead() string { return c.lead }

// ScriptArgs are a Script tool's positional arguments after the first.
func (c *Common) ScriptArgs() []string { return c.script }

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

func (c *Common) validate() error {
	a := c.Args
	if len(c.rest) > 0 {
		return usage.Errorf("unexpected argument %q: the arguments are [interval [count]]", c.rest[0])
	}
	if a.Interval != "" {
		// NaN fails every comparison: ask for the range, not its complement.
		secs, err := strconv.ParseFloat(a.Interval, 64)
		if err != nil || !(secs >= 0.001 && secs <= 1e6) {
			return usage.Errorf("invalid interval %q: want a number of seconds from 0.001 to 1000000", a.Interval)
		}
		c.interval = time.Duration(secs * float64(time.Second))
	}
	if why := MissingCommand(c.Command); why != "" {
		return usage.Errorf("%s: the command cannot start, and nothing would be traced", why)
	}
	if c.Timestamp && c.JSON {
		return usage.Errorf("-T and --json cannot be used together: -T dates text reports, and each JSON object has its time")
	}
	if a.Count != "" {
		n, err := strconv.Atoi(a.Count)
		if err != nil || n <= 0 {
			return usage.Errorf("invalid count %q: want a positive whole number of reports", a.Count)
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
	// Script says the positional arguments are not [interval [count]] but
	// an optional script and its arguments (Lead and ScriptArgs), as
	// bpftrace takes them; Usage is then the usage line after the name.
	Script bool
	Usage  string
	// Summary is the first line of --help; Details follows the options
	// (examples, notes), then Overhead: what a run costs the traced system.
	// The man page (ManPage) is made of the same texts.
	Summary, Details, Overhead string
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
// stderr and an exit status: 0 success, 1 runtime error, 2 usage error;
// with -c, the command's status when it failed on its own. It is the only
// place that prints errors, and it closes the session, which undoes
// everything the run created, before it prints.
func Main(t Tool, args []string) (status int) {
	var s *Session
	defer func() {
		if r := recover(); r != nil {
			if s != nil {
				_ = s.Close() // detach, remove probes, restore the terminal
			}
			fmt.Fprintf(os.Stderr, "%s: %s\n", t.Name, terminal.PrintableLines(crash.Error("internal error", r).Error()))
			status = 1
		}
	}()
	badUsage := func(err error) int {
		fmt.Fprintf(os.Stderr, "%s: %s\nTry '%s --help' for more information.\n", t.Name, terminal.PrintableLines(err.Error()), t.Name)
		return 2
	}
	if err := parse(t, args); err != nil {
		if errors.Is(err, errVersion) {
			fmt.Fprintln(os.Stdout, VersionLine(t.Name))
			return 0
		}
		var fe *flags.Error
		if errors.As(err, &fe) && fe.Type == flags.ErrHelp {
			fmt.Fprint(os.Stdout, fe.Message)
			return 0
		}
		return badUsage(err)
	}
	// SIGHUP (the terminal went away) ends the run as SIGINT does: final
	// report, cleanup, the live view restored.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	// A closed stdout must end in an error return, which detaches and
	// removes everything, not in a SIGPIPE death, which removes nothing. A
	// handler, not SIG_IGN: an ignored signal stays ignored in the -c
	// command, a handled one is reset to the default on exec.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	s = NewSession(t.Name, t.Options.common())
	finished := make(chan struct{})
	go watchStuck(ctx, finished, t.Name, s)
	runErr := run(ctx, t, s)
	closeErr := s.Close()
	close(finished)
	var ue *usage.Error
	switch {
	case runErr == nil && closeErr == nil:
		return s.commandStatus
	case closeErr == nil && (errors.Is(runErr, ErrStdoutClosed) || errors.Is(runErr, syscall.EPIPE)):
		// The reader of our output has had enough, as in "yes | head".
		return 0
	case errors.As(runErr, &ue):
		return badUsage(runErr)
	}
	// Errors quote files and processes (a note's name, a symbol): escaped,
	// they cannot drive the terminal.
	fmt.Fprintf(os.Stderr, "%s: %s\n", t.Name, terminal.PrintableLines(errors.Join(runErr, closeErr).Error()))
	return 1
}

// stuckAfter is how long a write to stdout may wait once a signal came:
// one blocked that long is on a stdout nobody reads (a full pipe; a
// terminal held with Ctrl-S). giveUpAfter bounds each step of the rest of
// the ending (Session.Phase: ending the command, each detach, the final
// report), whatever it waits on (the live heatmap's terminal writes are
// not tracked): an ending that goes on step by step is slow, not stuck
// (on a 1-CPU guest under emulation, each tracepoint's close waits out
// grace periods, 20 s in all).
const (
	stuckAfter  = StopGrace + 2*time.Second
	giveUpAfter = 30 * time.Second
)

// watchStuck ends a run that a signal did not end: blocked writing to
// stdout for stuckAfter, or giveUpAfter in one step of its ending (or
// after the signal, before the ending began). It closes the session itself
// (programs detached, probes removed, the command ended) and exits 1. A
// run that is closing already is left to finish.
func watchStuck(ctx context.Context, finished <-chan struct{}, name string, s *Session) {
	select {
	case <-finished:
		return
	case <-ctx.Done():
	}
	start := time.Now()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	why := ""
	for why == "" {
		select {
		case <-finished:
			return
		case now := <-tick.C:
			switch {
			case s.stdout.blockedFor(now) >= stuckAfter:
				why = "stdout is blocked (nothing reads it): ended without the final report"
			case now.Sub(latest(start, s.phaseStart())) >= giveUpAfter:
				step := ""
				if p := s.Phase(); p != "" {
					step = " (" + p + ")"
				}
				why = fmt.Sprintf("not done %v after the signal%s: ended without the final report", now.Sub(start).Round(time.Second), step)
			}
		}
	}
	first, err := s.close()
	if !first {
		return // the run's own close was under way: its exit follows
	}
	fmt.Fprintf(os.Stderr, "%s: %s\n", name, why)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %s\n", name, terminal.PrintableLines(err.Error()))
	}
	os.Exit(1)
}

// run is what every tool's run starts with: privileges, the sweep of
// probes left by killed runs, and the -c command held at its gate (so that
// its pid is known while the programs are built); then the tool's own Run.
func run(ctx context.Context, t Tool, s *Session) error {
	if err := checkAddressSpace(); err != nil {
		return err
	}
	if err := kernel.CheckPrivileges(t.Name); err != nil {
		return err
	}
	if os.Geteuid() == 0 {
		// Probes left by a toolkit process killed with SIGKILL: best effort.
		_ = perfevent.SweepStaleProbes()
	}
	if err := s.startCommand(); err != nil {
		return err
	}
	return t.Run(ctx, s)
}

// Version and Commit are set at build time (make build: -ldflags -X, from
// git describe and git rev-parse); without them Version is "dev" and the
// commit comes from the build's VCS stamp, if it has one.
var (
	Version = "dev"
	Commit  = ""
)

var errVersion = errors.New("--version")

// VersionLine is what --version prints: "NAME (tracekit) VERSION, commit
// COMMIT, built with GOVERSION"; the commit (from the build's VCS stamp) is
// marked -dirty when the tree had changes.
func VersionLine(name string) string {
	commit := "unknown"
	if Commit != "" {
		commit = Commit
	} else if bi, ok := debug.ReadBuildInfo(); ok {
		var rev, modified string
		for _, st := range bi.Settings {
			switch st.Key {
			case "vcs.revision":
				rev = st.Value
			case "vcs.modified":
				modified = st.Value
			}
		}
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if rev != "" {
			commit = rev
			if modified == "true" {
				commit += "-dirty"
			}
		}
	}
	if name != "tracekit" {
		name += " (tracekit)"
	}
	return fmt.Sprintf("%s %s, commit %s, built with %s", name, Version, commit, runtime.Version())
}

// exitHelp ends every tool's --help.
const exitHelp = `With -c, the command runs in a process group of its own, with stdin from
/dev/null when stdin is a terminal. Nothing it starts outlives the tool:
when the tool stops (Ctrl-C, the report count, a closed stdout, the command's
exit, even SIGKILL of the tool), every process of the command's tree, those
that left its process group or session included, gets SIGTERM, and SIGKILL
a second later.

The tracing ends before the final report: programs detached, probe events
removed, the command's processes ended. A report that waits on its reader
(a pager) holds nothing in the kernel meanwhile.

Where the kernel skips a program instead of running it (on 7.x kernels a
program can be preempted mid-run; the next event on that CPU finds it busy),
the event is counted as lost where each run is one; elsewhere, a line at the
end says how many runs the kernel skipped.

Exit status: 0 success, also when the reader of stdout goes away (as in
'| head -1'); 1 runtime error; 2 usage error. With -c, the command's status
when it fails on its own (128+N when signal N ends it), unless the tool
fails (1).
`

// newParser is the tool's command line: a fresh parser per call, so
// tests share no state.
func newParser(t Tool) (*flags.Parser, error) {
	p := flags.NewNamedParser(t.Name, flags.HelpFlag|flags.PassDoubleDash)
	// go-flags appends the positional arguments: "[interval] [count]".
	p.Usage = "[options]"
	if t.Lead != "" {
		p.Usage = "[options] " + t.Lead
	}
	if t.Usage != "" {
		p.Usage = t.Usage
	}
	p.ShortDescription = t.Summary
	p.LongDescription = t.Summary
	if _, err := p.AddGroup("Options", "", t.Options); err != nil {
		return nil, fmt.Errorf("options: %w", err)
	}
	return p, nil
}

// helpText is what --help prints after go-flags' usage and options.
func helpText(t Tool) string {
	s := strings.TrimRight(t.Details, "\n") + "\n\n"
	if t.Overhead != "" {
		s += "Overhead:\n" + strings.TrimRight(t.Overhead, "\n") + "\n\n"
	}
	return s + exitHelp
}

// Check parses and validates args as Main does before it runs anything,
// and runs nothing: a usage error is returned as Main would print it.
// The tests run every example of the tools' help through it.
func Check(t Tool, args []string) error { return parse(t, args) }

func parse(t Tool, args []string) error {
	p, err := newParser(t)
	if err != nil {
		return err
	}
	// perf's habit: the command after "--" (profile -- ./spin 0.3) is
	// -c's, its words as they are.
	var command []string
	if i := slices.Index(args, "--"); i >= 0 && !t.Script && i+1 < len(args) {
		args, command = args[:i], args[i+1:]
	}
	rest, err := p.ParseArgs(args)
	if err == nil && command != nil {
		c := t.Options.common()
		if c.Command != "" {
			return usage.Errorf("-c and a command after --: give one command")
		}
		c.Command = shellJoin(command)
	}
	if err == nil && t.Options.common().Version {
		return errVersion // before the positional checks: "filter --version" has no EVENT
	}
	if err != nil {
		var fe *flags.Error
		if errors.As(err, &fe) && fe.Type == flags.ErrMarshal {
			return marshalError(fe)
		}
		if m := expectedArg().FindStringSubmatch(err.Error()); m != nil {
			return usage.Errorf("%s wants a value, and %s reads as an option: write %s=%s", m[1], m[2], m[1], m[2])
		}
		if errors.As(err, &fe) && fe.Type == flags.ErrHelp {
			var b strings.Builder
			p.WriteHelp(&b)
			fe.Message = b.String() + "\n" + helpText(t)
			return fe
		}
		return err
	}
	// An option given an empty string means nothing: say so rather than
	// run as if it were not there (-c '', -d '', --where '').
	for _, g := range p.Groups() {
		for _, o := range g.Options() {
			if v, ok := o.Value().(string); ok && v == "" && o.IsSet() {
				return usage.Errorf("--%s is empty: give it a value, or leave it out", o.LongName)
			}
		}
	}
	c := t.Options.common()
	c.rest = rest
	if t.Script {
		a := &c.Args
		c.lead = a.Interval
		if a.Count != "" {
			c.script = append(c.script, a.Count)
		}
		c.script = append(c.script, rest...)
		a.Interval, a.Count, c.rest = "", "", nil
		if c.Cumulative || c.JSON || c.Timestamp {
			return usage.Errorf("--cumulative, --json and -T are for tools with reports: %s prints what its program prints", t.Name)
		}
	}
	if t.Lead != "" {
		// The first positional is the lead: shift the others down.
		a := &c.Args
		if a.Interval == "" {
			return usage.Errorf("missing %s", t.Lead)
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

// marshalFlag is go-flags' message for an option's value it could not
// convert: "invalid argument for flag `-p, --pid' (expected int64):
// strconv.ParseInt: ...".
var marshalFlag = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile("^invalid argument for flag `([^']+)' \\(expected (u?int|float)([0-9]*)\\)")
})

// marshalError says what a number option wanted, without Go's words
// (issue 62: "strconv.ParseInt: parsing \"abc\": invalid syntax").
func marshalError(fe *flags.Error) error {
	m := marshalFlag().FindStringSubmatch(fe.Message)
	if m == nil {
		return fe
	}
	want := "a whole number"
	switch {
	case m[2] == "uint":
		want = "a whole number, 0 or more"
	case m[2] == "float":
		want = "a number"
	}
	name := m[1]
	if i := strings.LastIndex(name, ", "); i >= 0 {
		name = name[i+2:] // --pid of "-p, --pid"
	}
	value := ""
	if v := marshalValue().FindStringSubmatch(fe.Message); v != nil {
		value = " " + strconv.Quote(terminal.Printable(v[1]))
		if v[2] == "value out of range" {
			want = "a number in its type's range: " + want
		}
	}
	return usage.Errorf("invalid value%s for %s: want %s", value, name, want)
}

// expectedArg is go-flags' message for an option followed by what looks
// like another option (a negative number).
var expectedArg = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile("^expected argument for flag `(?:-[^,]+, )?([^']+)', but got option `([^']+)'$")
})

// marshalValue is strconv's part of the message: the value and why.
var marshalValue = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`parsing "((?:[^"\\]|\\.)*)": (invalid syntax|value out of range)$`)
})

// shellJoin is argv as a -c line: its words as they are where they are
// plain, else each quoted for /bin/sh.
func shellJoin(argv []string) string {
	quoted := make([]string, len(argv))
	for i, w := range argv {
		if w != "" && strings.IndexFunc(w, func(c rune) bool {
			return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("_-./,:+@%=", c))
		}) < 0 {
			quoted[i] = w
			continue
		}
		quoted[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
	}
	return strings.Join(quoted, " ")
}

// latest is the later of a and b.
func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
