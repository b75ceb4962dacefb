package filter

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/internal/tooltest"
)

// --sum, --min, --max and --avg per comm over writes of 4099 bytes 3 times
// and 133 bytes 5 times: exactly 12962, 133, 4099 and 1620 (bpftrace's
// avg rounds toward zero: 12962 / 8); on the host, the same as bpftrace's
// sum(), min(), max() and avg() attached at the same time.
func TestStats(t *testing.T) {
	privtest.Require(t)
	where := "count == 4099 || count == 133"
	want := map[string]int64{"sum": 12962, "min": 133, "max": 4099, "avg": 1620}
	bin := tooltest.Tool(t, "filter")
	ours := map[string]*tracer{}
	for stat := range want {
		ours[stat] = startTracer(t, "Tracing", bin, "--json", "--"+stat, "count", "--count-by", "comm", "syscalls:sys_enter_write", "--where", where)
	}
	var bt *tracer
	if p := tooltest.Peer(t, "bpftrace", "bpftrace"); p != "" {
		// BEGIN runs once every probe is attached ("Attaching" comes before).
		bt = startTracer(t, "tk-ready", p, "-e", `BEGIN { printf("tk-ready\n"); } tracepoint:syscalls:sys_enter_write /args->count == 4099 || args->count == 133/ {
			@sum[comm] = sum(args->count); @min[comm] = min(args->count); @max[comm] = max(args->count); @avg[comm] = avg(args->count); }`)
	}
	if out, err := exec.Command("/bin/sh", "-c", tooltest.Writes(t, 4099, 3)+"; "+tooltest.Writes(t, 133, 5)).CombinedOutput(); err != nil {
		t.Fatalf("writes: %v %s", err, out)
	}
	comm := ""
	for stat, tr := range ours {
		out := tr.stop(t, func(string) bool { return true })
		var rep struct {
			Values []map[string]any `json:"values"`
		}
		if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &rep); err != nil || len(rep.Values) != 1 {
			t.Errorf("--%s: %v, %d keys, want 1: %q %s", stat, err, len(rep.Values), out, tr.errors())
			continue
		}
		v := rep.Values[0]
		key, _ := v["key"].(map[string]any)
		comm, _ = key["comm"].(string)
		if got := int64(num(v[stat])); got != want[stat] || int64(num(v["count"])) != 8 {
			t.Errorf("--%s count: %v over %v writes, want %d over 8", stat, v[stat], v["count"], want[stat])
		}
	}
	if bt == nil {
		return // in the guests; the host compares
	}
	out := bt.stop(t, func(string) bool { return true })
	for stat, w := range want {
		m := regexp.MustCompile(fmt.Sprintf(`@%s\[%s\]: (\d+)`, stat, regexp.QuoteMeta(comm))).FindStringSubmatch(out)
		if m == nil {
			t.Errorf("bpftrace has no @%s[%s]:\n%s", stat, comm, out)
			continue
		}
		if got, _ := strconv.ParseInt(m[1], 10, 64); got != w {
			t.Errorf("bpftrace's %s: %d, filter's %d", stat, got, w)
		}
	}
}
