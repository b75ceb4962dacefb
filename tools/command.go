package tools

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
)

// gate holds the command back until its writer end says go: the shell reads
// one line from fd 3, and only then execs the command, in the same process,
// so its pid is known (and can be filtered on) before it runs at all. If the
// tool dies before the go, the read sees EOF and the command never runs.
const gate = `IFS= read -r _ <&3 || exit 125; exec 3<&-; exec /bin/sh -c "$1"`

// Command is a -c command started behind the gate.
type Command struct {
	cmd     *exec.Cmd
	release *os.File
	done    chan struct{}
	err     error
}

// StartCommand starts /bin/sh -c line, held before it runs. stdout is where
// the command's standard output goes (stderr when stdout carries JSON).
func StartCommand(line string, stdout io.Writer) (*Command, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start command: %w", err)
	}
	cmd := exec.Command("/bin/sh", "-c", gate, "sh", line)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, os.Stderr
	cmd.ExtraFiles = []*os.File{r}
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("start command %q: %w", line, err)
	}
	r.Close()
	c := &Command{cmd: cmd, release: w, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

// Pid is the process id the command runs as.
func (c *Command) Pid() int { return c.cmd.Process.Pid }

// Release lets the command run.
func (c *Command) Release() error {
	_, err := c.release.Write([]byte("go\n"))
	c.release.Close()
	if err != nil {
		return fmt.Errorf("release command: %w", err)
	}
	return nil
}

// Done is closed when the command has exited.
func (c *Command) Done() <-chan struct{} { return c.done }

// Abort kills a command that has not been released (setup failed) and reaps it.
func (c *Command) Abort() {
	c.release.Close()
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
}

// ExitCode is the command's exit status once Done is closed (-1 if killed).
func (c *Command) ExitCode() int {
	var ee *exec.ExitError
	if errors.As(c.err, &ee) {
		return ee.ExitCode()
	}
	if c.err != nil {
		return -1
	}
	return 0
}
