package iolat

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/internal/promtest"
	"github.com/tracekit/tracekit/internal/tooltest"
)

// TestPrometheus scrapes iolat --serve -D with a real Prometheus: after
// exactly N direct IOs to a loop device of the test's own, the histogram's
// _count for that disk is N, and so is its +Inf bucket; the buckets are
// cumulative and the last finite one is 2^27 microseconds.
func TestPrometheus(t *testing.T) {
	privtest.Require(t)
	const n = 57
	dev := tooltest.LoopDevice(t)
	name := filepath.Base(dev)
	tool := promtest.Serve(t, "iolat", "127.0.0.1:0", "-D")
	tool.CheckCaps(t)
	prom := promtest.Start(t, tool.Addr)
	prom.WaitScrapes(t, tool.Addr, 1)
	if out, err := exec.Command("/bin/sh", "-c", directWrites(dev, n)).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	count := fmt.Sprintf(`tracekit_iolat_latency_seconds_count{disk=%q}`, name)
	prom.WaitFor(t, count, func(v float64) bool { return v >= n })
	prom.WaitScrapes(t, tool.Addr, 2)
	if v, _ := prom.Scalar(t, count); v != n {
		t.Errorf("%s = %v after exactly %d IOs", count, v, n)
	}
	buckets := prom.Query(t, fmt.Sprintf(`tracekit_iolat_latency_seconds_bucket{disk=%q}`, name), 0)
	le := map[string]float64{}
	for _, b := range buckets {
		le[b.Labels["le"]] = b.Value
	}
	if len(buckets) != 28 || le["+Inf"] != n || le["134.217728"] != n || le["2e-06"] > le["4e-06"] {
		t.Errorf("buckets of %s: %v", name, le)
	}
}
