package run

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/tracekit/tracekit/procfs"
)

// A -c command runs under a guard: this same executable started again as
// "tracekit-guard". The guard is the command's parent and a child
// subreaper (PR_SET_CHILD_SUBREAPER, 3.4+), so every process the command
// starts stays its descendant, however it leaves the command's process
// group or session (setsid, a double fork, a daemon), until it exits.
// When the tool closes the control pipe, or dies any way at all (SIGKILL
// included: the kernel closes its end), the guard ends that whole tree:
// SIGSTOP, SIGTERM and SIGCONT to every descendant (see endTree), then
// SIGKILL after StopGrace to every one left, until it has no child.
//
// The guard signals its own descendants and nothing else: no argument and
// no variable of the environment can aim it at a process it did not
// start. The tool follows the same tree in the kernel (proctree) from the
// command's pid, which the guard reports before the command is released.

// guardName is the guard's argv[0]; its one argument is the command line.
const guardName = "tracekit-guard"

// gate holds the command back until its writer end says go: the shell reads
// one line from fd 3, and only then execs the command, in the same process,
// so its pid is known (and can be filtered on) before it runs at all. If the
// tool dies before the go, the read sees EOF and the command never runs.
// First it says it is ready on fd 4, once the shell itself is loaded: the
// guard reports the pid only then, so that the tool attaches after the
// shell's own start (its loader's opens and maps), which a tracer of the
// command would otherwise see as the command's, as it does not under
// bpftrace, whose child is forked waiting.
const gate = `echo >&4; exec 4>&-; IFS= read -r _ <&3 || exit 125; exec 3<&-; exec "$@"`

// shellBuiltins are the POSIX shell's special and regular builtins a -c
// line may start with that are no program on $PATH.
var shellBuiltins = map[string]bool{
	"exit": true, "cd": true, "export": true, "set": true, "unset": true, "wait": true, "exec": true, "eval": true,
	"ulimit": true, "umask": true, "read": true, ".": true, ":": true, "trap": true, "shift": true, "times": true,
	"readonly": true, "return": true, "break": true, "continue": true, "command": true, "alias": true, "type": true,
}

// MissingCommand says why a -c line cannot start, before anything runs:
// a line of plain words whose first is no program on $PATH and no shell
// builtin (the shell would say "not found" and exit 127, and the tool
// report on a command that never ran). "" when it can start, or when it
// has shell syntax, whose meaning is the shell's.
func MissingCommand(line string) string {
	words := strings.Fields(line)
	if len(words) == 0 || shellBuiltins[words[0]] || strings.Contains(words[0], "=") {
		return ""
	}
	if _, shell := CommandArgv(line); !shell {
		return "" // found on $PATH
	}
	if _, err := exec.LookPath(words[0]); err == nil {
		return "" // shell syntax further on
	}
	for _, c := range line {
		plain := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("_-./,:+@%= \t", c)
		if !plain {
			return "" // the shell's to run (a function, a subshell, a redirection)
		}
	}
	if strings.Contains(words[0], "/") {
		return fmt.Sprintf("-c: %s: no such program (or not executable)", words[0])
	}
	return fmt.Sprintf("-c: %s: not found on $PATH", words[0])
}

// CommandArgv is how a -c command line runs: split into words and run
// as it is, as bpftrace -c does, when it is only words of plain
// characters and the first names a program (not a builtin such as exit),
// which is then given by its path;
// otherwise by /bin/sh -c, and shell says so. A process counts from its
// exec on (proctree): a shell that runs a command line is not counted,
// nor are its builtins; the processes it starts are.
func CommandArgv(line string) (argv []string, shell bool) {
	words := strings.Fields(line)
	if len(words) > 0 {
		// By its path: busybox's shell (with its standalone applets, as
		// Debian's busybox-static and most embedded systems build it) runs
		// a bare `exec dd` in itself, with no exec to start the tree at.
		if path, err := exec.LookPath(words[0]); err != nil {
			words = nil
		} else {
			words[0] = path
		}
	}
	for i, w := range words {
		for _, c := range w {
			plain := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("_-./,:+@%", c) || c == '=' && i > 0
			if !plain {
				return []string{"/bin/sh", "-c", line}, true
			}
		}
	}
	if len(words) == 0 {
		return []string{"/bin/sh", "-c", line}, true
	}
	return words, false
}

// The guard's inherited descriptors.
const (
	guardGateFD    = 3 // the gate's read end, handed on to the command as fd 3
	guardControlFD = 4 // EOF: end the tree
	guardStatusFD  = 5 // the guard's reports to the tool (see readStatus)
)

// Guard makes this process the guard of a -c command, and exits, when it
// was started as one; otherwise it returns at once. The binary's main
// calls it first (and so does TestMain in the tests that start commands):
// a library's init must not take a process over.
func Guard() {
	if len(os.Args) == 2 && filepath.Base(os.Args[0]) == guardName {
		os.Exit(guard(os.Args[1]))
	}
}

// nameAfterParent names the calling thread as the guard's parent (the
// tool) is named; it stays "exe" when that cannot be read.
func nameAfterParent() {
	f, err := os.Open(fmt.Sprintf("/proc/%d/comm", os.Getppid()))
	if err != nil {
		return
	}
	defer f.Close()
	b := make([]byte, 16) // TASK_COMM_LEN, with the newline
	n, _ := io.ReadFull(f, b)
	name := strings.TrimSuffix(string(b[:n]), "\n")
	if p, err := unix.BytePtrFromString(name); err == nil && name != "" {
		unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(p)), 0, 0, 0)
	}
}

// guard is a guard process's life: start the command, report its pid and
// its end, and end its tree when the tool is done or gone.
func guard(line string) int {
	for _, fd := range []int{guardGateFD, guardControlFD, guardStatusFD} {
		var st unix.Stat_t
		if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
			fmt.Fprintf(os.Stderr, "%s: started by hand: this process is a tool's own helper\n", guardName)
			return 2
		}
	}
	status := os.NewFile(guardStatusFD, "status")
	report := func(format string, args ...any) { fmt.Fprintf(status, format+"\n", args...) }
	// Caught, not ignored: the command starts with these at their defaults
	// (a caught signal is reset on exec, an ignored one stays ignored). The
	// guard is in a process group of its own, out of the terminal's reach;
	// SIGTERM aimed at it alone is swallowed too: the tool ends it.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT, unix.SIGPIPE, unix.SIGTSTP, unix.SIGTTIN, unix.SIGTTOU)
	go func() {
		for range sigs {
		}
	}()
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		report("error become a child subreaper: %v", err)
		return 1
	}
	// The command's parent, as a tracer of it sees it (a task's
	// real_parent is the thread that forked it), goes by the tool's name,
	// as under bpftrace or perf: the guard is its stand-in, and "exe"
	// (its name from /proc/self/exe) says nothing.
	runtime.LockOSThread()
	nameAfterParent()
	argv, _ := CommandArgv(line)
	cmd := exec.Command("/bin/sh", append([]string{"-c", gate, "sh"}, argv...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	readyR, readyW, err := os.Pipe()
	if err != nil {
		report("error %v", err)
		return 1
	}
	cmd.ExtraFiles = []*os.File{os.NewFile(guardGateFD, "gate"), readyW}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		report("error %v", err)
		return 1
	}
	cmd.ExtraFiles[0].Close()
	readyW.Close()
	// The shell's line, or EOF if it ended first (its exit is reported
	// all the same).
	readyR.Read(make([]byte, 1))
	readyR.Close()
	// Only the command holds the tool's standard streams: a reader of the
	// tool's output sees EOF once the tool and the command's tree are gone.
	if null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0); err == nil {
		for fd := 0; fd <= 2; fd++ {
			unix.Dup3(int(null.Fd()), fd, 0)
		}
		null.Close()
	}
	pid := cmd.Process.Pid
	report("pid %d", pid)

	empty := make(chan struct{})
	go func() {
		defer close(empty)
		for {
			var ws unix.WaitStatus
			got, err := unix.Wait4(-1, &ws, 0, nil)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				return // ECHILD: no child, so no descendant is left
			}
			if got == pid {
				report("exit %d", int(ws))
			}
		}
	}()
	io.Copy(io.Discard, os.NewFile(guardControlFD, "control"))
	select {
	case <-empty:
		// No child left, so no descendant: an orphan of the tree is this
		// subreaper's child. Nothing to end, and no /proc to scan three
		// times for it (a quarter of a second of a -c run in a guest).
		return 0
	default:
	}
	endTree(empty)
	return 0
}

// endTree ends every descendant of this process, and returns once empty
// is closed: SIGSTOP, SIGTERM and SIGCONT, then SIGKILL after StopGrace, again and again while
// processes remain (a child forked during a round, orphaned by the kill,
// becomes this subreaper's child and is found by the next).
func endTree(empty <-chan struct{}) {
	// Stopped first, so that no process of the tree sees another end
	// before it is signalled itself: a shell whose child died of SIGTERM
	// would otherwise run its next command ("sleep 7; echo late" printed
	// late, exit 0) before its own SIGTERM came. SIGCONT delivers them.
	signalTree(unix.SIGSTOP)
	signalTree(unix.SIGTERM)
	signalTree(unix.SIGCONT)
	select {
	case <-empty:
		return
	case <-time.After(StopGrace):
	}
	for {
		signalTree(unix.SIGKILL)
		select {
		case <-empty:
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// signalTree sends sig to every live descendant of this process.
func signalTree(sig unix.Signal) {
	self := os.Getpid()
	parents := processParents()
	for pid := range parents {
		if pid == self || !descends(parents, pid, self) {
			continue
		}
		// Pinned by a pidfd (5.3+), then checked again: a pid that was
		// reused since the scan is never signalled.
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			if errors.Is(err, unix.ENOSYS) {
				unix.Kill(pid, sig)
			}
			continue
		}
		if ppid, ok := parentOf(pid); ok && (ppid == self || descends(parents, ppid, self)) {
			unix.PidfdSendSignal(fd, sig, nil, 0)
		}
		unix.Close(fd)
	}
}

// processParents maps every live (non-zombie) process to its parent, from
// /proc.
func processParents() map[int]int {
	parents := map[int]int{}
	for _, pid := range procfs.Pids() {
		if ppid, ok := parentOf(pid); ok {
			parents[pid] = ppid
		}
	}
	return parents
}

// parentOf is the parent of pid, false for a zombie or a process gone.
func parentOf(pid int) (int, bool) {
	st, err := procfs.ReadStat(pid)
	return st.PPid, err == nil && st.Live()
}

// descends reports whether pid's chain of parents reaches ancestor.
func descends(parents map[int]int, pid, ancestor int) bool {
	for i := 0; i < len(parents) && pid > 1; i++ {
		ppid, ok := parents[pid]
		if !ok {
			return false
		}
		if ppid == ancestor {
			return true
		}
		pid = ppid
	}
	return false
}
