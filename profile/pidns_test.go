package profile

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/tracekit/tracekit/internal/stacktest"

	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/internal/tooltest"
)

// TestPidNamespace profiles a command inside a new pid namespace (unshare
// -fp --mount-proc): the program keys samples by the namespace's pids, the
// ones whose /proc/PID/maps profile reads there, so the shared-library
// fixture's stacks are unwound and named whole as outside.
func TestPidNamespace(t *testing.T) {
	stacktest.RequireUnwinder(t)
	privtest.Require(t)
	cmd := filepath.Join(stacktest.Fixtures(t), "chain-lib") + " 1.5 user"
	res := tooltest.InPidNS(t, tooltest.Tool(t, "profile"), "--json", "-F", "199", "-c", cmd)
	if res.Status != 0 {
		t.Fatalf("status %d\n%s", res.Status, res.Stderr)
	}
	var r report
	if err := json.Unmarshal([]byte(res.Stdout), &r); err != nil {
		t.Fatalf("%v\n%s", err, res.Stdout)
	}
	share, n := chainShare(r, "chain-lib", true)
	t.Logf("%d samples of chain-lib, %.1f%% whole chain", n, 100*share)
	if n < 100 || share < 0.95 {
		t.Errorf("%.1f%% of %d samples have the whole chain, want at least 95%% of 100 or more", 100*share, n)
		for _, st := range r.Stacks {
			t.Logf("%d %d %s %s %v | %v", st.Pid, st.Count, st.Comm, st.End, st.User, st.Kernel)
		}
	}
}
