package dropmon

import (
	"strings"
	"testing"

	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/internal/tooltest"
)

// TestPidNamespace runs dropmon -c inside a new pid namespace (unshare
// -fp --mount-proc): drops are the kernel's, counted whatever pid the
// command has, exactly as outside.
func TestPidNamespace(t *testing.T) {
	privtest.Require(t)
	const n = 23
	r := tooltest.InPidNS(t, tooltest.Tool(t, "dropmon"), "--json", "-c", tooltest.UDPDrops(t, n))
	if r.Status != 0 {
		t.Fatalf("exit %d: %s", r.Status, r.Stderr)
	}
	fn := udpFunc(t)
	var count uint64
	for _, d := range parse(t, r.Stdout).Drops {
		if strings.HasPrefix(d.Symbol, fn+"+0x") {
			count += d.Count
		}
	}
	if count != n {
		t.Errorf("%d drops at %s, want exactly %d: %s", count, fn, n, r.Stdout)
	}
}
