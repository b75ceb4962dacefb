package run

import (
	"fmt"
	"os"
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
