package run

import (
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tracekit/tracekit/internal/golden"
	"github.com/tracekit/tracekit/terminal"
)

type testOpts struct {
	Common
	Flag bool `long:"flag" description:"a flag"`
}

func TestParseCommon(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		interval time.Duration
		count    int
		err      string
	}{
		{nil, 0, 0, ""},
		{[]string{"1"}, time.Second, 0, ""},
		{[]string{"0.5", "3"}, 500 * time.Millisecond, 3, ""},
		{[]string{"abc"}, 0, 0, `invalid interval "abc"`},
		{[]string{"0"}, 0, 0, `invalid interval "0"`},
		{[]string{"1", "-"}, 0, 0, `invalid count "-"`},
		{[]string{"1", "2", "3"}, 0, 0, `unexpected argument "3"`},
		{[]string{"-1"}, 0, 0, "unknown flag `1'"},
	} {
		var o testOpts
		err := parse(Tool{Name: "t", Options: &o}, tc.args)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v: err %v, want %q", tc.args, err, tc.err)
			}
			continue
		}
		if err != nil || o.interval != tc.interval || o.count != tc.count {
			t.Errorf("%v: %v %v %d", tc.args, err, o.interval, o.count)
		}
	}
}

func TestWriteHistText(t *testing.T) {
	var b strings.Builder
	s := &Session{Tool: "t", Opts: &Common{Timestamp: true}, Stdout: &b}
	h1 := &terminal.Log2Hist{Label: "dd 42"}
	h1.Counts[4] = 2
	h2 := &terminal.Log2Hist{Label: "sh 43"}
	h2.Counts[1] = 1
	at := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	if err := s.WriteHist(&HistReport{Unit: "bytes", LabelKind: "process", Hists: []*terminal.Log2Hist{h1, h2}, Lost: 3}, at); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteHist(&HistReport{Unit: "bytes"}, at); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "report_text", b.String())
	b.Reset()
	s.Opts.JSON = true
	if err := s.WriteHist(&HistReport{Unit: "usecs", Hists: []*terminal.Log2Hist{h1}}, at); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "report_json", b.String())
}

// TestVersion: --version prints one line and exits 0, before any other
// check (a tool with a required lead argument has none here).
func TestVersion(t *testing.T) {
	var o struct{ Common }
	tool := Tool{Name: "tk", Summary: "s", Lead: "EVENT", Options: &o, Run: func(context.Context, *Session) error {
		t.Fatal("--version ran the tool")
		return nil
	}}
	if got := Main(tool, []string{"--version"}); got != 0 {
		t.Fatalf("exit %d", got)
	}
	line := VersionLine("tk")
	if !regexp.MustCompile(`^tk \(tracekit\) \S+, commit \S+, built with go\d`).MatchString(line) {
		t.Errorf("version line %q", line)
	}
	old := Commit
	Commit = "0123456789ab-dirty"
	defer func() { Commit = old }()
	if line := VersionLine("tk"); !strings.Contains(line, "commit 0123456789ab-dirty,") {
		t.Errorf("the build's commit is not printed: %q", line)
	}
}

// A command line of plain words naming a program runs as it is; shell
// syntax, a builtin or nothing at all runs by /bin/sh -c.
func TestCommandArgv(t *testing.T) {
	for _, tc := range []struct {
		line  string
		shell bool
	}{
		{"sleep 1", false},
		{"/bin/echo a,b x=1 -n 50%", false},
		{"  true  ", false},
		{"exit 3", true},
		{"exec sleep 1", true},
		{"echo $HOME", true},
		{"a | b", true},
		{"X=1 sleep 1", true},
		{"sleep 1; sleep 2", true},
		{"echo 'a b'", true},
		{"~/bin/x", true},
		{"", true},
		{"no-such-program-tk", true},
	} {
		argv, shell := CommandArgv(tc.line)
		if shell != tc.shell {
			t.Errorf("%q: shell %v, want %v (%q)", tc.line, shell, tc.shell, argv)
		}
		if want := strings.Fields(tc.line); !shell {
			// The program by its path (busybox's shell runs `exec dd` in
			// itself), the rest as written.
			if !filepath.IsAbs(argv[0]) || filepath.Base(argv[0]) != filepath.Base(want[0]) {
				t.Errorf("%q: runs %q, want %s by its path", tc.line, argv[0], want[0])
			}
			if strings.Join(argv[1:], "\x00") != strings.Join(want[1:], "\x00") {
				t.Errorf("%q: %q, want %q", tc.line, argv, want)
			}
		}
		if shell && (len(argv) != 3 || argv[0] != "/bin/sh" || argv[2] != tc.line) {
			t.Errorf("%q: %q, want /bin/sh -c", tc.line, argv)
		}
	}
}
