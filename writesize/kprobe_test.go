package writesize

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/internal/tooltest"
	"github.com/tracekit/tracekit/tracefs"
)

// On a kernel without kprobes (our host), --kprobe is one clear line and
// exit 1. Kernels with kprobes run the tests below instead (make test-vm).
func TestKprobeOnKernelWithout(t *testing.T) {
	privtest.Require(t)
	if tracefs.KprobesAvailable() {
		t.Skip("this kernel has kprobes: the error for kernels without them does not apply")
	}
	r := runTool(t, "--kprobe", "-c", "true")
	if r.Status != 1 || strings.Count(r.Stderr, "\n") != 1 || !strings.Contains(r.Stderr, "CONFIG_KPROBES") || !strings.Contains(r.Stderr, "tracepoint") {
		t.Errorf("exit %d, stderr %q", r.Status, r.Stderr)
	}
}

func TestKprobeExactCounts(t *testing.T) {
	privtest.RequireKprobes(t)
	const n = 23
	for _, legacy := range []string{"0", "1"} {
		for _, size := range []int{0, 1, 3000} {
			cmd := exec.Command(tool(t), "--kprobe", "--json", "-c", writer(t, size, n))
			cmd.Env = append(os.Environ(), "TRACEKIT_LEGACY_KPROBES="+legacy)
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			if err := cmd.Run(); err != nil {
				t.Fatalf("legacy=%s size %d: %v: %s", legacy, size, err, errb.String())
			}
			reps := parseJSON(t, out.String())
			h := reps[0].Histograms[0]
			got := nonEmpty(h.Buckets)
			if len(got) != 1 || got[0].Count != n || h.Total != n {
				t.Errorf("legacy=%s size %d: buckets %+v, want exactly %d", legacy, size, got, n)
			}
		}
	}
}

func pidNS(t *testing.T) uint64 {
	t.Helper()
	ns, err := tracefs.PidNamespace()
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

// ourGroups lists the probe groups of writesize processes.
func ourGroups(t *testing.T) []string {
	t.Helper()
	events, err := tracefs.ListProbes(tracefs.Kprobe)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range events {
		if strings.HasPrefix(e.Group, "tk_writesize_") {
			out = append(out, e.Group)
		}
	}
	return out
}

// startTracing starts writesize with a legacy kprobe and waits until it
// has attached; the probe group is in kprobe_events then.
func startTracing(t *testing.T, stdout io.Writer, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(tool(t), append([]string{"--kprobe", "--legacy"}, args...)...)
	cmd.Stdout = stdout
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stderr).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "Tracing") {
		cmd.Process.Kill()
		t.Fatalf("no tracing line: %q %v", line, err)
	}
	group := tracefs.Group("writesize", pidNS(t), cmd.Process.Pid)
	found := false
	for _, g := range ourGroups(t) {
		found = found || g == group
	}
	if !found {
		t.Fatalf("group %s not registered: %v", group, ourGroups(t))
	}
	return cmd
}

func waitExit(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		return 0
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		t.Fatal("writesize did not exit")
	}
	return -1
}

func TestKprobeCleanupOnEveryExit(t *testing.T) {
	privtest.RequireKprobes(t)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		cmd := startTracing(t, io.Discard)
		cmd.Process.Signal(sig)
		if st := waitExit(t, cmd); st != 0 {
			t.Errorf("%v: exit %d", sig, st)
		}
		if g := ourGroups(t); len(g) != 0 {
			t.Errorf("after %v: groups left %v", sig, g)
		}
	}

	// The reader goes away: the tool notices, exits 0 and still removes
	// its probe.
	r, w, _ := os.Pipe()
	cmd := startTracing(t, w, "0.2", "5")
	w.Close()
	r.Close()
	if st := waitExit(t, cmd); st != 0 {
		t.Errorf("closed stdout: exit %d, want 0", st)
	}
	if g := ourGroups(t); len(g) != 0 {
		t.Errorf("after a closed stdout: groups left %v", g)
	}

	// SIGKILL leaves the group behind; the next run of a tool sweeps it.
	cmd = startTracing(t, io.Discard)
	cmd.Process.Kill()
	cmd.Wait()
	stale := tracefs.Group("writesize", pidNS(t), cmd.Process.Pid)
	if g := ourGroups(t); len(g) != 1 || g[0] != stale {
		t.Fatalf("after SIGKILL: groups %v, want %s", g, stale)
	}
	if res := tooltest.Run(t, tooltest.Tool(t, "writesize"), "-c", "true"); res.Status != 0 {
		t.Fatalf("next run: %d %s", res.Status, res.Stderr)
	}
	if g := ourGroups(t); len(g) != 0 {
		t.Errorf("the next run did not sweep %v", g)
	}
}
