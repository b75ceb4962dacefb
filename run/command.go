package run

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// gate holds the command back until its writer end says go: the shell reads
// one line from fd 3, and only then execs the command, in the same process,
// so its pid is known (and can be filtered on) before it runs at all. If the
// tool dies before the go, the read sees EOF and the command never runs.
const gate = `IFS= read -r _ <&3 || exit 125; exec 3<&-; exec /bin/sh -c "$1"`

// StopGrace is how long a command has to exit after SIGTERM before it is
// sent SIGKILL.
const StopGrace = time.Second

// Command is a -c command started behind the gate, in a process group of
// its own, so that the tool can end it with everything it started.
type Command struct {
	cmd      *exec.Cmd
	release  *os.File
	released bool
	done     chan struct{}
	err      error
}

// StartCommand starts /bin/sh -c line, held before it runs. stdout is where
// the command's standard output goes (stderr when stdout carries JSON).
// The command starts with default signal dispositions: the Go runtime
// resets the signals it handles on exec, and the toolkit ignores none.
func StartCommand(line string, stdout io.Writer) (*Command, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start command: %w", err)
	}
	cmd := exec.Command("/bin/sh", "-c", gate, "sh", line)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, os.Stderr
	if IsTerminal(0) {
		// Its own process group is in the terminal's background: a read of
		// the terminal would stop it (SIGTTIN) for good.
		cmd.Stdin = nil // /dev/null
	}
	cmd.ExtraFiles = []*os.File{r}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("start command %q: %w", line, err)
	}
	r.Close()
	g, alive, err := startGuard(cmd.Process.Pid)
	if err != nil {
		w.Close() // the gate sees EOF: the command never runs
		cmd.Wait()
		return nil, err
	}
	c := &Command{cmd: cmd, release: w, done: make(chan struct{})}
	go func() {
		// The guard goes before the command is reaped: once it is, its
		// process group id is free for another, which the guard must
		// never signal.
		var info unix.Siginfo
		for {
			err := unix.Waitid(unix.P_PID, cmd.Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
			if err != unix.EINTR {
				break
			}
		}
		g.Process.Kill()
		g.Wait()
		alive.Close()
		c.err = cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

// guardEnv, in a process's environment, makes it the guard of the -c
// command whose process group it names (see startGuard).
const guardEnv = "TRACEKIT_GUARD_PGID"

// Guard makes this process the guard of a -c command, and exits, when
// startGuard started it as one; otherwise it returns at once. The
// binary's main calls it first (and so does TestMain in the tests that
// start commands): a library's init must not take a process over.
func Guard() {
	if v := os.Getenv(guardEnv); v != "" {
		os.Exit(guard(v))
	}
}

// startGuard starts this same executable as the guard of the command's
// process group pgid: it waits, in a process group of its own, ignoring
// the terminal's signals, for EOF on a pipe only the tool holds open. A
// tool that exits any way at all, SIGKILL included, closes it, and the
// guard ends the command's group as Stop would (SIGTERM, then SIGKILL
// after StopGrace). A tool that reaps its command kills the guard first.
// PR_SET_PDEATHSIG on the command would not do: the shell's children (a
// pipeline, a loop) do not inherit it.
func startGuard(pgid int) (guard *exec.Cmd, alive *os.File, err error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("start the command's guard: %w", err)
	}
	defer r.Close()
	g := exec.Command("/proc/self/exe")
	g.Env = append(os.Environ(), fmt.Sprintf("%s=%d", guardEnv, pgid))
	g.ExtraFiles = []*os.File{r}
	g.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := g.Start(); err != nil {
		w.Close()
		return nil, nil, fmt.Errorf("start the command's guard: %w", err)
	}
	// w is close-on-exec: no command inherits it, only this process's end
	// (or killing the guard) closes it.
	return g, w, nil
}

// guard is a guard process's life: wait for the tool's end, then end the
// command's process group, if it still has members.
func guard(v string) int {
	pgid, err := strconv.Atoi(v)
	if err != nil || pgid <= 1 {
		return 2
	}
	signal.Ignore(unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT, unix.SIGPIPE, unix.SIGTSTP, unix.SIGTTIN, unix.SIGTTOU)
	io.Copy(io.Discard, os.NewFile(3, "tool"))
	if unix.Kill(-pgid, unix.SIGTERM) != nil {
		return 0
	}
	time.Sleep(StopGrace)
	unix.Kill(-pgid, unix.SIGKILL)
	return 0
}

// IsTerminal reports whether fd is a terminal.
func IsTerminal(fd int) bool {
	_, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	return err == nil
}

// Pid is the process id the command runs as, and its process group id.
func (c *Command) Pid() int { return c.cmd.Process.Pid }

// Release lets the command run.
func (c *Command) Release() error {
	c.released = true
	_, err := c.release.Write([]byte("go\n"))
	c.release.Close()
	if err != nil {
		return fmt.Errorf("release command: %w", err)
	}
	return nil
}

// Done is closed when the command has exited.
func (c *Command) Done() <-chan struct{} { return c.done }

// Exited reports whether the command has exited (and was reaped).
func (c *Command) Exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// Stop ends a command that is still running and reaps it: SIGTERM to its
// process group, then SIGKILL after grace. A command never released sees
// EOF at the gate and exits 125 without running. Stop after the command
// exited does nothing: what it left running in the background is its own.
func (c *Command) Stop(grace time.Duration) error {
	c.release.Close()
	if !c.released {
		select {
		case <-c.done:
		case <-time.After(grace):
		}
	}
	if c.Exited() {
		return nil
	}
	pgid := c.Pid()
	if err := unix.Kill(-pgid, unix.SIGTERM); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("end the command: %w", err)
	}
	select {
	case <-c.done:
		return nil
	case <-time.After(grace):
	}
	if err := unix.Kill(-pgid, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("end the command: %w", err)
	}
	<-c.done
	return nil
}

// Status is the command's exit status once Done is closed, as a shell
// reports it: its exit code, or 128+N when signal N ended it.
func (c *Command) Status() int {
	var ee *exec.ExitError
	if errors.As(c.err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	if c.err != nil {
		return 1
	}
	return 0
}
