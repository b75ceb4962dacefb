package filter

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/internal/tooltest"
)

// TestPidNamespace runs filter inside a new pid namespace (unshare -fp
// --mount-proc): -p and the pid builtin name the namespace's pids, and
// what is printed is too. Of 50 writes of 123 bytes by one process and 17
// by the traced one, exactly the 17 are counted.
func TestPidNamespace(t *testing.T) {
	privtest.Require(t)
	bin := tooltest.Tool(t, "filter")
	tooltest.ForEachSyscallHook(t, "write", func(t *testing.T) {
		for _, c := range []struct {
			name string
			args []string
		}{
			{"-p", []string{"--count", "--json", "syscalls:sys_enter_write", "--where", "'count == 123'", `-p "$target"`}},
			{"pid", []string{"--count", "--json", "syscalls:sys_enter_write", "--where", `"count == 123 && pid == $target"`}},
		} {
			t.Run(c.name, func(t *testing.T) {
				r := tooltest.InPidNS(t, "/bin/sh", "-c", tooltest.PidNSScript(t, bin, c.args...))
				if r.Status != 0 {
					t.Fatalf("exit %d: %s", r.Status, r.Stderr)
				}
				var rep struct {
					Count uint64 `json:"count"`
				}
				if err := json.Unmarshal([]byte(strings.TrimSpace(r.Stdout)), &rep); err != nil || rep.Count != 17 {
					t.Errorf("count %d (%v), want exactly 17: %q", rep.Count, err, r.Stdout)
				}
			})
		}
		t.Run("fields", func(t *testing.T) {
			r := tooltest.InPidNS(t, "/bin/sh", "-c", tooltest.PidNSScript(t, bin, "--json", "--fields", "pid,count", "syscalls:sys_enter_write", "--where", "'count == 123'", `-p "$target"`))
			if r.Status != 0 {
				t.Fatalf("exit %d: %s", r.Status, r.Stderr)
			}
			m := regexp.MustCompile(`(?m)^target (\d+)$`).FindStringSubmatch(r.Stderr)
			if m == nil {
				t.Fatalf("no target pid: %s", r.Stderr)
			}
			n := 0
			for _, l := range lines(r.Stdout) {
				var ev struct {
					Fields map[string]any `json:"fields"`
				}
				if err := json.Unmarshal([]byte(l), &ev); err != nil {
					t.Fatalf("%q: %v", l, err)
				}
				if got, _ := ev.Fields["pid"].(float64); strconv.Itoa(int(got)) != m[1] {
					t.Errorf("pid %v, want %s, the writer's pid in its namespace", got, m[1])
				}
				n++
			}
			if n != 17 {
				t.Errorf("%d events, want 17: %s", n, r.Stdout)
			}
		})
	})
}
