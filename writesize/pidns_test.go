package writesize

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/internal/tooltest"
	"github.com/tracekit/tracekit/terminal"
)

// TestPidNamespaceCommand runs writesize -c inside a new pid namespace
// (unshare -fp --mount-proc), where the command's pid is not the kernel's:
// its writes are counted exactly, and -P labels it with the pid it sees
// itself as.
func TestPidNamespaceCommand(t *testing.T) {
	privtest.Require(t)
	tooltest.ForEachHook(t, "", func(t *testing.T) {
		r := tooltest.InPidNS(t, tool(t), "--json", "-c", writer(t, 512, 100))
		if r.Status != 0 {
			t.Fatalf("exit %d: %s", r.Status, r.Stderr)
		}
		h := parseJSON(t, r.Stdout)[0].Histograms[0]
		want := []terminal.Bucket{{Low: 512, High: 1023, Count: 100}}
		if got := nonEmpty(h.Buckets); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("buckets %+v, want exactly %+v", got, want)
		}

		// The shell says its pid on stderr (one write of its own), then
		// becomes the writer.
		line := `echo "pid $$" >&2; exec env ` + writer(t, 512, 100)
		r = tooltest.InPidNS(t, tool(t), "--json", "-P", "-c", line)
		if r.Status != 0 {
			t.Fatalf("-P: exit %d: %s", r.Status, r.Stderr)
		}
		pid := regexp.MustCompile(`(?m)^pid (\d+)$`).FindStringSubmatch(r.Stderr)
		if pid == nil {
			t.Fatalf("-P: the command did not say its pid: %s", r.Stderr)
		}
		var found bool
		for _, h := range parseJSON(t, r.Stdout)[0].Histograms {
			if !strings.HasSuffix(h.Label, " "+pid[1]) {
				t.Errorf("-P: histogram %q: the command's only process is pid %s in its namespace", h.Label, pid[1])
				continue
			}
			for _, b := range h.Buckets {
				if b.Low == 512 && b.Count == 100 {
					found = true
				}
			}
		}
		if !found {
			t.Errorf("-P: no histogram of pid %s with 100 writes in 512 -> 1023: %s", pid[1], r.Stdout)
		}
	})
}

// TestPidNamespacePid traces with -p a process named by its pid in a new
// pid namespace: its 17 writes are counted, not the other process's 50,
// and -P labels it with that pid.
func TestPidNamespacePid(t *testing.T) {
	privtest.Require(t)
	r := tooltest.InPidNS(t, "/bin/sh", "-c", tooltest.PidNSScript(t, tool(t), "--json", "-P", `-p "$target"`))
	if r.Status != 0 {
		t.Fatalf("exit %d: %s", r.Status, r.Stderr)
	}
	m := regexp.MustCompile(`(?m)^target (\d+)$`).FindStringSubmatch(r.Stderr)
	if m == nil {
		t.Fatalf("no target pid: %s", r.Stderr)
	}
	var total uint64
	for _, rep := range parseJSON(t, r.Stdout) {
		for _, h := range rep.Histograms {
			if !strings.HasSuffix(h.Label, " "+m[1]) {
				t.Errorf("histogram %q is not of pid %s", h.Label, m[1])
			}
			for _, b := range h.Buckets {
				if b.Count != 0 && b.Low != 64 {
					t.Errorf("%s: %d writes in %d -> %d, want only 64 -> 127", h.Label, b.Count, b.Low, b.High)
				}
			}
			total += h.Total
		}
	}
	if total != 17 {
		t.Errorf("%d writes counted, want exactly 17: %s", total, r.Stdout)
	}
}
