package run

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestMain makes the test binary a -c command's guard when it was started
// as one, and with TK_HOLD_COMMAND=LINE a stand-in for a tool: start the
// command, let it run, wait to be killed.
func TestMain(m *testing.M) {
	Guard()
	if line := os.Getenv("TK_HOLD_COMMAND"); line != "" {
		c, err := StartCommand(line, nil)
		if err == nil {
			err = c.Release()
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		select {}
	}
	os.Exit(m.Run())
}

// TestMissingCommand: a -c line of plain words whose program is nowhere
// is refused before anything runs (issue 62: the shell said "not found",
// then the tool printed an empty report); a builtin, an assignment or
// shell syntax is the shell's to run.
func TestMissingCommand(t *testing.T) {
	for line, missing := range map[string]bool{
		"nosuchcmd --x":         true,
		"/nonexistent/prog":     true,
		"true":                  false,
		"exit 3":                false,
		"FOO=1 true":            false,
		"nosuchcmd || true":     false,
		"cd /tmp && nosuchcmd":  false,
		"nosuchcmd 2>/dev/null": false,
		"sleep 0.1":             false,
		"./relative-nosuch arg": true,
		"":                      false,
	} {
		if got := MissingCommand(line) != ""; got != missing {
			t.Errorf("MissingCommand(%q) = %q: want missing %v", line, MissingCommand(line), missing)
		}
	}
	err := Check(Tool{Name: "t", Options: &struct{ Common }{}}, []string{"-c", "nosuchcmd --x"})
	if err == nil || !strings.Contains(err.Error(), "nosuchcmd: not found on $PATH: the command cannot start") {
		t.Errorf("Check: %v", err)
	}
}

// TestNumberOptions: an option's number that does not parse is one line
// that names the option, the value and what it wants, in no Go words
// (issue 62: "strconv.ParseInt: parsing \"abc\": invalid syntax").
func TestNumberOptions(t *testing.T) {
	type opts struct {
		Common
		Pid   int64   `short:"p" long:"pid"`
		Keys  uint32  `long:"max-keys"`
		Ratio float64 `long:"ratio"`
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-p", "abc"}, `invalid value "abc" for --pid: want a whole number`},
		{[]string{"--max-keys=-1"}, `invalid value "-1" for --max-keys: want a whole number, 0 or more`},
		{[]string{"--max-keys", "-1"}, "--max-keys wants a value, and -1 reads as an option: write --max-keys=-1"},
		{[]string{"--max-keys", "99999999999"}, `invalid value "99999999999" for --max-keys: want a number in its type's range: a whole number, 0 or more`},
		{[]string{"--ratio", "x"}, `invalid value "x" for --ratio: want a number`},
	} {
		err := Check(Tool{Name: "t", Options: &opts{}}, c.args)
		if err == nil || err.Error() != c.want || strings.Contains(err.Error(), "strconv") {
			t.Errorf("%q: %v, want %q", c.args, err, c.want)
		}
	}
}

// TestCommandAfterDoubleDash: perf's habit, "profile -- ./spin 0.3", runs
// the words after -- as -c's command (issue 62: "invalid interval").
func TestCommandAfterDoubleDash(t *testing.T) {
	for _, c := range []struct {
		args    []string
		command string
	}{
		{[]string{"--", "sleep", "0.3"}, "sleep 0.3"},
		{[]string{"1", "2", "--", "sh", "-c", "echo 'a b'; exit 3"}, `sh -c 'echo '\''a b'\''; exit 3'`},
	} {
		o := &struct{ Common }{}
		if err := Check(Tool{Name: "t", Options: o}, c.args); err != nil || o.Command != c.command {
			t.Errorf("%q: %v, command %q; want %q", c.args, err, o.Command, c.command)
		}
	}
	if err := Check(Tool{Name: "t", Options: &struct{ Common }{}}, []string{"-c", "true", "--", "true"}); err == nil {
		t.Error("-c and -- CMD together: taken")
	}
	if argv, shell := CommandArgv(`sh -c 'echo '\''a b'\''; exit 3'`); !shell || argv[2] != `sh -c 'echo '\''a b'\''; exit 3'` {
		t.Errorf("the quoted line runs by %q", argv)
	}
}
