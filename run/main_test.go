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
