package run

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// StopGrace is how long a command's processes have to exit after SIGTERM
// before they are sent SIGKILL.
const StopGrace = time.Second

// stopWait bounds how long Stop waits, past the grace, for the guard to
// report every process gone: a process stuck in an uninterruptible sleep
// cannot be killed at once, and the tool must not hang on it.
const stopWait = 3 * time.Second

// Command is a -c command started under its guard (see guard.go): the
// guard is its parent and the reaper of everything it starts, and ends
// that whole tree when the tool stops it or is gone.
type Command struct {
	guard    *exec.Cmd
	pid      int
	release  *os.File // the gate's write end
	control  *os.File // the guard's control pipe: closing it ends the tree
	released bool
	done     chan struct{} // closed when the command exited
	gone     chan struct{} // closed when the guard exited: the tree is gone
	status   int
}

// StartCommand starts /bin/sh -c line under a guard, held at the gate
// before it runs. stdout is where the command's standard output goes
// (stderr when stdout carries JSON).
func StartCommand(line string, stdout *os.File) (*Command, error) {
	var files [6]*os.File // gate r/w, control r/w, status r/w
	for i := 0; i < len(files); i += 2 {
		r, w, err := os.Pipe()
		if err != nil {
			for _, f := range files[:i] {
				f.Close()
			}
			return nil, fmt.Errorf("start command: %w", err)
		}
		files[i], files[i+1] = r, w
	}
	gateR, gateW, controlR, controlW, statusR, statusW := files[0], files[1], files[2], files[3], files[4], files[5]
	g := exec.Command("/proc/self/exe", line)
	g.Args[0] = guardName
	g.Stdin, g.Stdout, g.Stderr = os.Stdin, stdout, os.Stderr
	if stdout == nil {
		g.Stdout = os.Stdout
	}
	if IsTerminal(0) {
		// The command's process group is in the terminal's background: a
		// read of the terminal would stop it (SIGTTIN) for good.
		g.Stdin = nil // /dev/null
	}
	g.ExtraFiles = []*os.File{gateR, controlR, statusW}
	// Its own process group: the terminal's Ctrl-C reaches the tool
	// alone, which ends the command when it has reported.
	g.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err := g.Start()
	gateR.Close()
	controlR.Close()
	statusW.Close()
	if err != nil {
		gateW.Close()
		controlW.Close()
		statusR.Close()
		return nil, fmt.Errorf("start command %q: %w", line, err)
	}
	c := &Command{guard: g, release: gateW, control: controlW, done: make(chan struct{}), gone: make(chan struct{})}
	status := bufio.NewReader(statusR)
	word, arg := readStatus(status)
	if word != "pid" {
		gateW.Close()
		controlW.Close()
		statusR.Close()
		g.Wait()
		if word == "error" {
			return nil, fmt.Errorf("start command %q: %s", line, arg)
		}
		return nil, fmt.Errorf("start command %q: its guard ended before it started", line)
	}
	c.pid, _ = strconv.Atoi(arg)
	go func() {
		defer close(c.gone)
		defer statusR.Close()
		for {
			word, arg := readStatus(status)
			if word != "exit" {
				break
			}
			ws, _ := strconv.Atoi(arg)
			c.status = shellStatus(syscall.WaitStatus(ws))
			close(c.done)
		}
		g.Wait()
		select {
		case <-c.done:
		default: // the guard was killed: the command's end is unknown
			c.status = 1
			close(c.done)
		}
	}()
	return c, nil
}

// readStatus reads one line of the guard's reports: "pid N", "exit
// WAITSTATUS" or "error MESSAGE"; "" at the end.
func readStatus(r *bufio.Reader) (word, arg string) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", ""
	}
	word, arg, _ = strings.Cut(strings.TrimSuffix(line, "\n"), " ")
	return word, arg
}

// shellStatus is a wait status as a shell reports it: the exit code, or
// 128+N when signal N ended the process.
func shellStatus(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// IsTerminal reports whether fd is a terminal.
func IsTerminal(fd int) bool {
	_, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	return err == nil
}

// Pid is the process id the command runs as, and its process group id.
func (c *Command) Pid() int { return c.pid }

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

// Exited reports whether the command has exited.
func (c *Command) Exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// Stop ends every process of the command's tree, the command itself if it
// still runs and whatever it left behind (a background job, a daemon that
// called setsid): SIGTERM, then SIGKILL after StopGrace. A command never
// released sees EOF at the gate and exits 125 without running. Stop
// returns once the guard reports the tree gone; twice is harmless.
func (c *Command) Stop() error {
	c.release.Close()
	if !c.released {
		// The gate reads EOF: let the shell exit 125 on its own.
		select {
		case <-c.done:
		case <-time.After(StopGrace):
		}
	}
	c.control.Close()
	select {
	case <-c.gone:
		return nil
	case <-time.After(StopGrace + stopWait):
		return fmt.Errorf("end the command: its processes did not end %v after SIGKILL (their guard, pid %d, goes on trying)", stopWait, c.guard.Process.Pid)
	}
}

// Status is the command's exit status once Done is closed, as a shell
// reports it: its exit code, or 128+N when signal N ended it.
func (c *Command) Status() int {
	<-c.done
	return c.status
}
