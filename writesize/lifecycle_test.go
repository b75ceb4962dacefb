package writesize

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tracekit/tracekit/internal/pgroup"
	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/internal/slots"
	"github.com/tracekit/tracekit/internal/tooltest"
	"github.com/tracekit/tracekit/run"
	"github.com/tracekit/tracekit/terminal"
)

// With a report count, the tool stops before its command ends: it ends the
// command's whole process group and reaps it before it returns, so nothing
// of the command prints after the tool has exited.
func TestCountEndsTheCommand(t *testing.T) {
	privtest.Require(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	start := time.Now()
	// The run returns only when every writer of its stdout pipe is gone:
	// a command left running would hold it for 7 s.
	r := runTool(t, "-c", "echo $$ > "+pidFile+"; sleep 7 & sleep 7; echo late", "0.2", "2")
	took := time.Since(start)
	if r.Status != 0 || strings.Contains(r.Stdout, "late") || took > 4*time.Second {
		t.Fatalf("exit %d after %v, stdout %q, stderr %q", r.Status, took, r.Stdout, r.Stderr)
	}
	if n := strings.Count(r.Stdout, "bytes"); n != 2 {
		t.Errorf("%d reports, want 2:\n%s", n, r.Stdout)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pgid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	// The background sleep's zombie waits for init to reap it.
	for i := 0; i < 40 && !errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH); i++ {
		time.Sleep(50 * time.Millisecond)
	}
	if err := syscall.Kill(-pgid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("the command's process group %d outlived the tool: %v", pgid, err)
	}
}

// With -c, the tool exits with the command's status when it fails (128+N
// for signal N), 0 when it succeeds.
func TestCommandStatusIsTheToolsStatus(t *testing.T) {
	privtest.Require(t)
	for line, want := range map[string]int{"true": 0, "exit 3": 3, "kill -9 $$": 137} {
		r := runTool(t, "-c", line)
		if r.Status != want {
			t.Errorf("-c %q: exit %d, want %d (stderr %q)", line, r.Status, want, r.Stderr)
		}
		if !strings.Contains(r.Stdout, "bytes") {
			t.Errorf("-c %q: no report:\n%s", line, r.Stdout)
		}
	}
	// A tool error wins over the command's status.
	r := runTool(t, "--kprobe=no_such_function_tk", "-c", "exit 3")
	if r.Status != 1 {
		t.Errorf("tool error with a failing command: exit %d, want 1 (stderr %q)", r.Status, r.Stderr)
	}
}

// The command starts with SIGPIPE at its default: "yes | head -1" ends.
func TestCommandGetsDefaultSignals(t *testing.T) {
	privtest.Require(t)
	start := time.Now()
	r := runTool(t, "-c", "yes | head -1")
	if r.Status != 0 || strings.Contains(r.Stderr, "Broken pipe") || strings.Contains(r.Stderr, "I/O error") || time.Since(start) > 5*time.Second {
		t.Errorf("exit %d after %v, stderr %q", r.Status, time.Since(start), r.Stderr)
	}
}

// A closed stdout ends the run within a second, quietly, with status 0,
// even when the tool has nothing to print until the end.
func TestClosedStdoutEndsTheRun(t *testing.T) {
	privtest.Require(t)
	for _, args := range [][]string{nil, {"1"}, {"--json", "0.3"}} {
		pr, pw, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(tool(t), args...)
		cmd.Stdout = pw
		stderr, _ := cmd.StderrPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pw.Close()
		errs := bufio.NewReader(stderr)
		if line, _ := errs.ReadString('\n'); !strings.HasPrefix(line, "Tracing") {
			t.Fatalf("%v: %q", args, line)
		}
		pr.Close()
		closed := time.Now()
		done := make(chan error, 1)
		var rest string
		go func() {
			rest, _ = errs.ReadString(0)
			done <- cmd.Wait()
		}()
		select {
		case err := <-done:
			if err != nil || rest != "" || time.Since(closed) > time.Second+500*time.Millisecond {
				t.Errorf("%v: %v after %v, stderr %q", args, err, time.Since(closed), rest)
			}
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Errorf("%v: still running 5 s after its stdout was closed", args)
		}
	}
}

// TestTreeForgetsExitedProcesses runs more processes one after another
// than the process-tree map holds (--max-tree 16): exited ones
// leave the map, so every write of all 60 is counted. 40 at once do not
// fit: the run says so on stderr.
func TestTreeForgetsExitedProcesses(t *testing.T) {
	privtest.Require(t)
	const n = 60
	// No seq: its output would be one more write.
	r := runTool(t, "--json", "--max-tree", "16", "-c", fmt.Sprintf("i=0; while [ $i -lt %d ]; do %s; i=$((i+1)); done", n, writer(t, 3, 1)))
	if r.Status != 0 {
		t.Fatalf("exit %d: %s", r.Status, r.Stderr)
	}
	reps := parseJSON(t, r.Stdout)
	lo, hi := terminal.SlotRange(slots.Log2Of(3))
	if got := nonEmpty(reps[0].Histograms[0].Buckets); len(got) != 1 || got[0] != (terminal.Bucket{Low: lo, High: hi, Count: n}) {
		t.Errorf("buckets %+v, want %d writes of 3 bytes", got, n)
	}
	if strings.Contains(r.Stderr, "not followed") {
		t.Errorf("stderr says processes were lost: %s", r.Stderr)
	}
	r = runTool(t, "--json", "--max-tree", "16", "-c", fmt.Sprintf("i=0; while [ $i -lt 40 ]; do (sleep 1; %s) & i=$((i+1)); done; wait", writer(t, 3, 1)))
	if r.Status != 0 {
		t.Fatalf("exit %d: %s", r.Status, r.Stderr)
	}
	if !strings.Contains(r.Stderr, "of the command's processes were not followed") {
		t.Errorf("40 processes at once in a map of 16, and stderr says nothing of it: %q", r.Stderr)
	}
}

// TestHangupEndsWithAReport: SIGHUP (the terminal went away) ends the run
// as SIGINT does, with the final report and exit status 0, not a death
// that skips the cleanup.
func TestHangupEndsWithAReport(t *testing.T) {
	privtest.Require(t)
	cmd := exec.Command(tool(t), "--json")
	var out strings.Builder
	cmd.Stdout = &out
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line, _ := bufio.NewReader(stderr).ReadString('\n'); !strings.HasPrefix(line, "Tracing") {
		cmd.Process.Kill()
		t.Fatalf("%q", line)
	}
	cmd.Process.Signal(syscall.SIGHUP)
	err := cmd.Wait()
	if err != nil {
		t.Fatalf("after SIGHUP: %v", err)
	}
	if reps := parseJSON(t, out.String()); len(reps) != 1 || reps[0].Tool != "writesize" {
		t.Errorf("after SIGHUP: %q, want the final report", out.String())
	}
}

// TestFullNameMapIsReported: with the name map lowered to 4 entries
// (--max-comms 4), 40 processes that write and exit leave some labelled
// "?" (the names of exited processes leave the map at each drain, every
// second: how many depends on how the drains split the run), and the run
// says how many and why instead of staying silent.
func TestFullNameMapIsReported(t *testing.T) {
	privtest.Require(t)
	r := runTool(t, "-P", "--max-comms", "4", "-c", fmt.Sprintf("i=0; while [ $i -lt 40 ]; do %s; i=$((i+1)); done", writer(t, 3, 1)))
	if r.Status != 0 {
		t.Fatalf("exit %d: %s", r.Status, r.Stderr)
	}
	unnamed := regexp.MustCompile(`(?m)^process = \? \d+$`).FindAllString(r.Stdout, -1)
	if len(unnamed) == 0 {
		t.Errorf("no process labelled '?':\n%s", r.Stdout)
	}
	if want := fmt.Sprintf("%d processes print as '?': their names did not fit in the name map (4 entries)", len(unnamed)); !strings.Contains(r.Stderr, want) {
		t.Errorf("stderr %q, want %q", r.Stderr, want)
	}
}

// A tool killed by SIGKILL cannot end its command: its guard does, the
// whole process group, within the stop grace.
func TestKilledToolEndsItsCommand(t *testing.T) {
	privtest.Require(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	cmd := exec.Command(tool(t), "-c", "echo $$ > "+pidFile+"; sleep 30 | cat; echo late")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pgid int
	for i := 0; i < 250 && pgid == 0; i++ {
		time.Sleep(20 * time.Millisecond)
		b, _ := os.ReadFile(pidFile)
		pgid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	if pgid == 0 {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal("the command did not start")
	}
	// The pipeline started: sleep and cat run in the group.
	started := func() bool {
		comms := map[string]bool{}
		for _, pid := range pgroup.Live(pgid) {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
			comms[strings.TrimSpace(string(b))] = true
		}
		return comms["sleep"] && comms["cat"]
	}
	for deadline := time.Now().Add(5 * time.Second); !started() && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	cmd.Process.Kill()
	cmd.Wait()
	killed := time.Now()
	for time.Since(killed) < 3*time.Second && len(pgroup.Live(pgid)) > 0 {
		time.Sleep(20 * time.Millisecond)
	}
	if live := pgroup.Live(pgid); len(live) > 0 {
		syscall.Kill(-pgid, syscall.SIGKILL)
		t.Fatalf("the command's processes %v outlived the SIGKILLed tool by %v", live, time.Since(killed))
	}
}

// With stdout a pipe nobody reads, the tool blocks in a write; SIGINT must
// still end the run (cleaned up, status 1, one line why), not hang.
func TestSignalEndsARunBlockedOnStdout(t *testing.T) {
	privtest.Require(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd := exec.Command(tool(t), "0.001")
	var stderr strings.Builder
	cmd.Stdout, cmd.Stderr = w, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	// Reports a millisecond apart fill the pipe; the signal comes once
	// the tool is blocked writing, which the pipe says by holding as much
	// as it did 600 ms ago. (A fixed 2 s was too short in the arm64 guest
	// of the CI of cc25766: the pipe not full yet, the final report
	// written, exit 0.)
	size, err := unix.FcntlInt(r.Fd(), unix.F_GETPIPE_SZ, 0)
	if err != nil {
		t.Fatal(err)
	}
	held := func() int {
		n, _ := unix.IoctlGetInt(int(r.Fd()), unix.TIOCINQ) // FIONREAD
		return n
	}
	for start, last, same := time.Now(), -1, 0; same < 3; {
		if time.Since(start) > time.Minute {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("the pipe holds %d of %d bytes after a minute of reports a millisecond apart", held(), size)
		}
		time.Sleep(200 * time.Millisecond)
		n := held()
		if n == last && n >= size/2 {
			same++
		} else {
			same = 0
		}
		last = n
	}
	cmd.Process.Signal(syscall.SIGINT)
	ended := make(chan error, 1)
	go func() { ended <- cmd.Wait() }()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-ended
		t.Fatal("still running 10 s after SIGINT")
	}
	if st := cmd.ProcessState.ExitCode(); st != 1 || !strings.Contains(stderr.String(), "stdout is blocked") {
		t.Errorf("exit %d, stderr %q; want 1 and a line saying stdout is blocked", st, stderr.String())
	}
}

// Nothing in the environment makes a tool signal a process it did not
// start: the guard of old read the process group to end from
// TRACEKIT_GUARD_PGID, and so ran nothing and killed the group named.
func TestEnvironmentCannotAimTheGuard(t *testing.T) {
	privtest.Require(t)
	victim := exec.Command("sleep", "987.04")
	victim.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	defer victim.Process.Kill()
	exited := make(chan struct{})
	go func() { victim.Wait(); close(exited) }()
	t.Setenv("TRACEKIT_GUARD_PGID", strconv.Itoa(victim.Process.Pid))
	r := runTool(t, "-c", "echo hi")
	if r.Status != 0 || !strings.HasPrefix(r.Stdout, "hi\n") {
		t.Errorf("exit %d, stdout %q, stderr %q: the command did not run", r.Status, r.Stdout, r.Stderr)
	}
	select {
	case <-exited:
		t.Errorf("the tool ended process group %d, which it did not start", victim.Process.Pid)
	case <-time.After(run.StopGrace + 500*time.Millisecond):
	}
}

// TestFewOpenFiles runs writesize under open-file limits from 8 to 40:
// each run either works or ends with one line and exit 1, and the load
// that runs out of descriptors says so and names the limit. (EMFILE was
// shown as a verifier rejection, with the log of a program that passed.)
func TestFewOpenFiles(t *testing.T) {
	privtest.Require(t)
	said := false
	// Each limit fails at a later open; a whole run is the slow case, and
	// more room than a run that succeeded needs changes nothing: the
	// limits stop after three in a row succeed.
	for n, ran := 8, 0; n <= 40 && ran < 3; n++ {
		r := tooltest.Run(t, "sh", "-c", fmt.Sprintf("ulimit -n %d && exec %s -c true", n, tool(t)))
		if r.Status == 0 {
			ran++
			continue
		}
		ran = 0
		if r.Status != 1 || strings.Count(r.Stderr, "\n") != 1 || strings.Contains(r.Stderr, "verifier") {
			t.Errorf("ulimit -n %d: exit %d, stderr %q; want 0, or 1 and one line", n, r.Status, r.Stderr)
		}
		said = said || strings.Contains(r.Stderr, fmt.Sprintf("too many open files: the limit is %d (ulimit -n)", n))
	}
	if !said {
		t.Errorf("no limit from 8 to 40 stopped the load with %q", "too many open files: the limit is N (ulimit -n)")
	}
}

// After the -c command ends, the final report may wait on its reader (a
// pager; here a pipe left full) as long as the reader likes, but the
// tracing ends first: while the write waits, the tool holds no attachment
// (perf event, BPF link), and the report, read at last, is exact.
func TestFinalReportWaitsDetached(t *testing.T) {
	privtest.Require(t)
	tooltest.ForEachHook(t, "", func(t *testing.T) {
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			t.Fatal(err)
		}
		r, w := os.NewFile(uintptr(p[0]), "r"), os.NewFile(uintptr(p[1]), "w")
		defer r.Close()
		room, err := unix.FcntlInt(uintptr(p[1]), unix.F_SETPIPE_SZ, 4096)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(make([]byte, room)); err != nil { // full: the tool's first write waits
			t.Fatal(err)
		}
		const n = 25
		cmd := exec.Command(tool(t), "--json", "-c", writer(t, 300, n))
		var stderr strings.Builder
		cmd.Stdout, cmd.Stderr = w, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		w.Close()
		ended := make(chan error, 1)
		go func() { ended <- cmd.Wait() }()
		wchans, blocked := "", false
		for deadline := time.Now().Add(10 * time.Second); !blocked && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
			wchans, blocked = inStdoutWrite(cmd.Process.Pid)
		}
		held := attachmentFDs(cmd.Process.Pid)
		out, _ := io.ReadAll(r)
		<-ended
		if !blocked {
			t.Fatalf("the tool never waited in a write to its full stdout (its threads are in syscalls %s); stderr %q", wchans, stderr.String())
		}
		if len(held) > 0 {
			t.Errorf("while its final report waited on stdout, the tool still held %v: the tracing must end before the report", held)
		}
		if st := cmd.ProcessState.ExitCode(); st != 0 {
			t.Fatalf("exit %d, stderr %q", st, stderr.String())
		}
		reps := parseJSON(t, string(out[room:]))
		lo, hi := terminal.SlotRange(slots.Log2Of(300))
		want := []terminal.Bucket{{Low: lo, High: hi, Count: n}}
		if len(reps) != 1 || len(reps[0].Histograms) != 1 || !slices.Equal(nonEmpty(reps[0].Histograms[0].Buckets), want) {
			t.Errorf("report %+v, want one histogram of exactly %+v", reps, want)
		}
	})
}

// inStdoutWrite reports whether a thread of pid is in write(2) to fd 1,
// by its /proc syscall file (wchan reads 0 on x86-64 before 5.16), and
// where each thread is.
func inStdoutWrite(pid int) (string, bool) {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/syscall", pid))
	var ws []string
	in := false
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		fields := strings.Fields(string(b))
		in = in || len(fields) > 1 && fields[0] == strconv.Itoa(unix.SYS_WRITE) && fields[1] == "0x1"
		ws = append(ws, strings.Join(fields[:min(len(fields), 2)], " "))
	}
	return strings.Join(ws, ", "), in
}

// attachmentFDs lists pid's descriptors that attach a program: perf
// events and BPF links (the maps and programs stay for the report).
func attachmentFDs(pid int) []string {
	fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
	var held []string
	for _, fd := range fds {
		target, _ := os.Readlink(fd)
		if strings.Contains(target, "perf_event") || strings.Contains(target, "link") || strings.Contains(target, "raw-tracepoint") {
			held = append(held, target)
		}
	}
	return held
}
