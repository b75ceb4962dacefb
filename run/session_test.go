package run

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tracekit/tracekit/internal/pgroup"
)

// The session closes everything it was given, last first, each once, even
// when one close fails, and joins the errors.
func TestSessionClosesInReverseEvenWhenOneFails(t *testing.T) {
	s := NewSession("t", &Common{})
	var order []string
	add := func(name string, err error) {
		s.OnClose(name, func() error { order = append(order, name); return err })
	}
	add("load", nil)
	add("attach tracepoint", errors.New("detach failed"))
	add("probe", nil)
	add("rings", errors.New("unmap failed"))
	err := s.Close()
	if got := strings.Join(order, ","); got != "rings,probe,attach tracepoint,load" {
		t.Errorf("close order %s", got)
	}
	if err == nil || !strings.Contains(err.Error(), "rings: unmap failed") || !strings.Contains(err.Error(), "attach tracepoint: detach failed") {
		t.Errorf("error %v", err)
	}
	order = nil
	if err := s.Close(); err != nil || len(order) != 0 {
		t.Errorf("second Close: %v, ran %v", err, order)
	}
}

// Stop(nil) ends the loop with the final report; Stop(err) returns err.
func TestSessionStop(t *testing.T) {
	for _, stopErr := range []error{nil, errors.New("boom")} {
		s := NewSession("t", &Common{})
		s.Quiet, s.stdoutFD = true, -1
		var finals int
		go s.Stop(stopErr)
		err := s.Loop(context.Background(), "x", func(final bool) error {
			if final {
				finals++
			}
			return nil
		})
		if err != stopErr || (stopErr == nil) != (finals == 1) {
			t.Errorf("Stop(%v): err %v, %d final reports", stopErr, err, finals)
		}
	}
}

// A pipe whose reader went away ends the loop, quietly, within a poll.
func TestSessionNoticesClosedStdout(t *testing.T) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[1])
	s := NewSession("t", &Common{})
	s.Quiet, s.stdoutFD = true, p[1]
	if stdoutClosed(p[1]) {
		t.Fatal("an open pipe reads as closed")
	}
	unix.Close(p[0])
	start := time.Now()
	err := s.Loop(context.Background(), "x", func(bool) error { return nil })
	if !errors.Is(err, ErrStdoutClosed) || time.Since(start) > time.Second {
		t.Errorf("err %v after %v", err, time.Since(start))
	}
}

// A command stopped while it runs is ended with its whole process group
// and reaped; one that was never released never runs.
func TestCommandStop(t *testing.T) {
	c, err := StartCommand("sleep 30 & sleep 30; echo late", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Release(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // both sleeps started
	pgid := c.Pid()
	start := time.Now()
	if err := c.Stop(StopGrace); err != nil {
		t.Fatal(err)
	}
	if !c.Exited() || time.Since(start) > StopGrace+time.Second {
		t.Errorf("not reaped, or too slow: %v", time.Since(start))
	}
	// The background sleep was reparented: its zombie waits for init.
	for i := 0; i < 40 && !errors.Is(unix.Kill(-pgid, 0), unix.ESRCH); i++ {
		time.Sleep(50 * time.Millisecond)
	}
	if err := unix.Kill(-pgid, 0); !errors.Is(err, unix.ESRCH) {
		t.Errorf("process group %d still has members: %v", pgid, err)
	}
	if st := c.Status(); st != 128+int(unix.SIGTERM) {
		t.Errorf("status %d, want %d (SIGTERM)", st, 128+int(unix.SIGTERM))
	}

	held, err := StartCommand("exit 0", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := held.Stop(StopGrace); err != nil || held.Status() != 125 {
		t.Errorf("never released: %v, status %d, want 125 from the gate", err, held.Status())
	}
}

func TestCommandStatus(t *testing.T) {
	for line, want := range map[string]int{"true": 0, "exit 3": 3, "kill -9 $$": 137} {
		c, err := StartCommand(line, nil)
		if err != nil {
			t.Fatal(err)
		}
		c.Release()
		<-c.Done()
		if got := c.Status(); got != want {
			t.Errorf("%q: status %d, want %d", line, got, want)
		}
	}
}

// A tool killed by SIGKILL runs no code, and its command, in a process
// group of its own, would run on: the guard ends the group instead, within
// the stop grace.
func TestCommandDiesWithKilledTool(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	tool := exec.Command(os.Args[0], "-test.run=^$")
	tool.Env = append(os.Environ(), "TK_HOLD_COMMAND=echo $$ > "+pidFile+"; sleep 30 | cat; echo late")
	if err := tool.Start(); err != nil {
		t.Fatal(err)
	}
	var pid int
	for i := 0; i < 100 && pid == 0; i++ {
		time.Sleep(20 * time.Millisecond)
		b, _ := os.ReadFile(pidFile)
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	if pid == 0 {
		tool.Process.Kill()
		tool.Wait()
		t.Fatal("the command did not start")
	}
	time.Sleep(100 * time.Millisecond) // the pipeline started
	tool.Process.Kill()
	tool.Wait()
	killed := time.Now()
	// Its members are reparented: zombies wait for init, and do not count.
	for time.Since(killed) < StopGrace+2*time.Second && len(pgroup.Live(pid)) > 0 {
		time.Sleep(20 * time.Millisecond)
	}
	if live := pgroup.Live(pid); len(live) > 0 {
		unix.Kill(-pid, unix.SIGKILL)
		t.Fatalf("the command's processes %v outlived its SIGKILLed tool by %v", live, time.Since(killed))
	}
	t.Logf("the command's group ended %v after the tool's SIGKILL", time.Since(killed).Round(time.Millisecond))
}

// A signal during the setup (ctx done before Loop) means the command
// never runs, and nothing is reported.
func TestSignalBeforeReleaseNeverRunsTheCommand(t *testing.T) {
	ran := filepath.Join(t.TempDir(), "ran")
	s := NewSession("t", &Common{Command: "touch " + ran})
	s.Quiet, s.stdoutFD = true, -1
	if err := s.startCommand(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	reports := 0
	err := s.Loop(ctx, "x", func(bool) error { reports++; return nil })
	if cerr := s.Close(); err != nil || cerr != nil || reports != 0 {
		t.Fatalf("Loop: %v, Close: %v, %d reports; want nil, nil, 0", err, cerr, reports)
	}
	if _, err := os.Stat(ran); err == nil {
		t.Error("the command ran after the signal")
	}
}

// A signal once the command runs ends the command before the final report
// (its last moments are in it), not after the session's teardown, during
// which it would run on untraced.
func TestSignalEndsTheCommandBeforeTheFinalReport(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	s := NewSession("t", &Common{Command: "echo $$ > " + pidFile + "; sleep 30 | cat"})
	s.Quiet, s.stdoutFD = true, -1
	if err := s.startCommand(); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	var live []int
	err := s.Loop(ctx, "x", func(final bool) error {
		b, _ := os.ReadFile(pidFile)
		if pgid, _ := strconv.Atoi(strings.TrimSpace(string(b))); pgid > 0 {
			live = pgroup.Live(pgid)
		} else {
			t.Error("the command did not start")
		}
		return nil
	})
	if err != nil || len(live) > 0 {
		t.Errorf("Loop: %v; the command's processes %v still ran at the final report", err, live)
	}
}

// A panic in a goroutine the session started ends the run as an error,
// not the process: Main's recover sees the main goroutine only.
func TestSessionGoRecovers(t *testing.T) {
	s := NewSession("t", &Common{})
	s.Go("the test's goroutine", func() { panic("boom") })
	select {
	case <-s.stopc:
	case <-time.After(5 * time.Second):
		t.Fatal("the panic did not stop the run")
	}
	if s.stopErr == nil || s.stopErr.Error() != "internal error in the test's goroutine: boom" {
		t.Errorf("stop error %v", s.stopErr)
	}
}
