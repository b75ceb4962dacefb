package filter

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tracekit/tracekit/filter/compile"
	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/internal/tooltest"
)

// canarySize is the size of the writes startBpftrace makes until bpftrace
// says it saw one.
const canarySize = 7777

// selfComm is this test binary's comm, as the kernel keeps it (15 bytes).
func selfComm() string {
	self := filepath.Base(os.Args[0])
	if len(self) > 15 {
		self = self[:15]
	}
	return self
}

// startBpftrace starts bpftrace with script and a probe of its own that
// prints when it sees a write of canarySize bytes, and writes those until
// it does: then every probe of the script is attached too (bpftrace says
// "Attaching" before it attaches, and BEGIN runs before the others are).
func startBpftrace(t *testing.T, bt, script string) *tracer {
	t.Helper()
	tr := startTracer(t, "Attaching", bt, "-e", script+fmt.Sprintf(` tracepoint:syscalls:sys_enter_write /args->count == %d/ { printf("tk-attached\n"); }`, canarySize))
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	buf := make([]byte, canarySize)
	for deadline := time.Now().Add(time.Minute); !strings.Contains(tr.output(), "tk-attached"); {
		if time.Now().After(deadline) {
			t.Fatalf("bpftrace has not seen a write in a minute: %s%s", tr.output(), tr.errors())
		}
		null.Write(buf)
		time.Sleep(20 * time.Millisecond)
	}
	return tr
}

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
		bt = startBpftrace(t, p, `tracepoint:syscalls:sys_enter_write /args->count == 4099 || args->count == 133/ {
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

// --lhist count,10,100,10 over writes of 5 bytes 3 times, 15 bytes twice
// and 250 bytes once: slots (..., 10) 3, [10, 20) 2, [100, ...) 1 and the
// empty ones between; on the host, the same lines, byte for byte, as
// bpftrace's lhist(args->count, 10, 100, 10) attached at the same time.
func TestLhist(t *testing.T) {
	privtest.Require(t)
	// The test binary's own writes: another process's 5 bytes (a tool's
	// write to a control file as it attaches) are not ours.
	self := selfComm()
	where := fmt.Sprintf(`comm == "%s" && (count == 5 || count == 15 || count == 250)`, self)
	ours := startTracer(t, "Tracing", tooltest.Tool(t, "filter"), "--lhist", "count,10,100,10", "syscalls:sys_enter_write", "--where", where)
	var bt *tracer
	if p := tooltest.Peer(t, "bpftrace", "bpftrace"); p != "" {
		bt = startBpftrace(t, p, fmt.Sprintf(`tracepoint:syscalls:sys_enter_write /comm == "%s" && (args->count == 5 || args->count == 15 || args->count == 250)/ { @ = lhist(args->count, 10, 100, 10); }`, self))
	}
	cmd := tooltest.Writes(t, 5, 3) + "; " + tooltest.Writes(t, 15, 2) + "; " + tooltest.Writes(t, 250, 1)
	if out, err := exec.Command("/bin/sh", "-c", cmd).CombinedOutput(); err != nil {
		t.Fatalf("writes: %v %s", err, out)
	}
	got := lines(ours.stop(t, func(string) bool { return true }))
	row := func(label string, n int) string {
		bar := n * 52 / 3
		return fmt.Sprintf("%-16s%8d |%s%s|", label, n, strings.Repeat("@", bar), strings.Repeat(" ", 52-bar))
	}
	want := []string{row("(..., 10)", 3), row("[10, 20)", 2)}
	for _, lo := range []int{20, 30, 40, 50, 60, 70, 80, 90} {
		want = append(want, row(fmt.Sprintf("[%d, %d)", lo, lo+10), 0))
	}
	want = append(want, row("[100, ...)", 1))
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("--lhist:\n%s\nwant\n%s\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"), ours.errors())
	}
	if bt == nil {
		return // in the guests; the host compares
	}
	var theirs []string
	for _, l := range lines(bt.stop(t, func(string) bool { return true })) {
		if strings.HasPrefix(l, "[") || strings.HasPrefix(l, "(") {
			theirs = append(theirs, l)
		}
	}
	if strings.Join(got, "\n") != strings.Join(theirs, "\n") {
		t.Errorf("filter's lines differ from bpftrace's:\n%s\nbpftrace:\n%s", strings.Join(got, "\n"), strings.Join(theirs, "\n"))
	}
}

// Keys whose strings end alike at their NUL are one key (6.1's
// bpf_get_current_comm leaves the stack's bytes after it), and a key in
// the fast path's slots is the hash's key too: their slots merge, counts
// and sums added, the least min and the greatest max.
func TestStatsMergesKeysThatDecodeAlike(t *testing.T) {
	privtest.Require(t)
	prog := &compile.Program{Columns: []compile.Column{{Name: "comm", String: true, Size: 16}}, Size: 16, MaxKeys: 8, StatsSigned: true, StatsCache: true}
	coll := tooltest.Maps(t, compile.Maps(compile.Stats, prog))
	m := coll.Maps[compile.StatsMap]
	cpus := tooltest.PossibleCPUs(t)
	put := func(key string, count, sum, lo, hi int64) {
		var k [16]byte
		copy(k[:], key)
		slots := make([][4]int64, cpus)
		slots[0] = [4]int64{count, sum, lo, hi}
		if err := m.Put(k, slots); err != nil {
			t.Fatal(err)
		}
	}
	put("filter.test\x00AAAA", 3, 300, 7, 200)
	put("filter.test\x00BBBB", 2, -10, -20, 10)
	put("other\x00", 1, 5, 5, 5)
	// The fast path's slots (asm.StatsCache): a key the hash has too, on
	// another CPU, and one of its own.
	cache := coll.Maps[compile.StatsCacheMap]
	slot := func(i uint32, cpu int, key string, count, sum, lo, hi int64) {
		slots := make([][6]int64, cpus)
		var k [16]byte
		copy(k[:], key)
		slots[cpu] = [6]int64{int64(binary.NativeEndian.Uint64(k[:])), int64(binary.NativeEndian.Uint64(k[8:])), count, sum, lo, hi}
		if err := cache.Put(i, slots); err != nil {
			t.Fatal(err)
		}
	}
	slot(5, cpus-1, "filter.test", 1, 1000, 1000, 1000)
	slot(6, 0, "cached", 2, 4, 1, 3)
	rows, err := readStats(m, cache, prog, "min")
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 {
		t.Fatalf("%d rows, want 3: %+v", len(rows), rows)
	}
	got := map[string]stat{}
	for _, r := range rows {
		got[r.cells[0].text] = r
	}
	if st := got["filter.test"]; st.count != 6 || st.sum.Int64() != 1290 || int64(st.min) != -20 || int64(st.max) != 1000 || st.text != "-20" {
		t.Errorf("filter.test: count %d sum %d min %d max %d (%s), want 6, 1290, -20, 1000", st.count, st.sum, int64(st.min), int64(st.max), st.text)
	}
	if st := got["cached"]; st.count != 2 || st.sum.Int64() != 4 || st.min != 1 || st.max != 3 {
		t.Errorf("cached: count %d sum %d min %d max %d, want 2, 4, 1, 3", st.count, st.sum, st.min, st.max)
	}
	if rows[0].cells[0].text != "other" || rows[1].cells[0].text != "cached" {
		t.Errorf("the largest value first (5, 1, then -20, signed): rows %+v", rows)
	}
}

// A CPU's sum wraps at 64 bits in the kernel: the true one is the number
// its bits stand for between count*min and count*max, where one is; past
// 64 bits it is printed whole, and the mean of INT64_MAX values is
// INT64_MAX (it was -1). Where two numbers would do, the sum and the
// mean are said to have overflowed, not printed wrong.
func TestStatsPastWrap(t *testing.T) {
	maxI := uint64(math.MaxInt64)
	for _, c := range []struct {
		n, sum, lo, hi uint64
		signed         bool
		want           string // "" for overflow
	}{
		{3, 3 * maxI, maxI, maxI, true, "27670116110564327421"},
		{2, 0, 1 << 63, 1 << 63, false, "18446744073709551616"},
		{2, ^uint64(0), 1 << 63, maxI, true, "-1"}, // INT64_MIN + INT64_MAX
		{4, 40, 10, 10, true, "40"},
		{3, 3, ^uint64(4), 5, true, "3"},    // -5..5, no wrap
		{4, 0, 1 << 63, maxI, true, ""},     // -2^63..2^63-1 four times: 0 or ±2^64
		{1 << 40, 7, 0, 1 << 40, false, ""}, // 2^80 wide
		{2, 5, 10, 10, false, "5"},          // bits no sum gives: a torn read, as read
	} {
		got, ok := trueSum(c.n, c.sum, c.lo, c.hi, c.signed)
		if c.want == "" {
			if ok {
				t.Errorf("trueSum%v = %v, want overflow", c, got)
			}
			continue
		}
		if !ok || got.String() != c.want {
			t.Errorf("trueSum%v = %v (%v), want %s", c, got, ok, c.want)
		}
	}
	st := stat{count: 3, min: maxI, max: maxI, sum: new(big.Int).Mul(big.NewInt(3), new(big.Int).SetUint64(maxI))}
	if v, text := statValue(st, "avg", true); v != int64(math.MaxInt64) || text != "9223372036854775807" {
		t.Errorf("avg of INT64_MAX three times: %v %q", v, text)
	}
	if _, text := statValue(st, "sum", true); text != "27670116110564327421" {
		t.Errorf("sum of INT64_MAX three times: %q", text)
	}
	st.overflow = true
	if v, text := statValue(st, "sum", true); v != nil || text != "overflow" {
		t.Errorf("an overflowed sum: %v %q, want nil and overflow", v, text)
	}
}

// Four writes of 4 bytes, each counted as 4 << 60 = 2^62: the kernel's
// 64-bit sum wraps to 0, and --sum and --avg say 2^64 and 2^62 (they
// said 0 and 0). 2^62, not 2^63: count is 8 unsigned bytes on 64-bit
// kernels and 4 on 32-bit ARM's (an int64 there, where 2^63 is negative).
func TestStatsPastWrapRun(t *testing.T) {
	privtest.Require(t)
	want := map[string]string{"sum": "18446744073709551616", "avg": "4611686018427387904"}
	for stat, w := range want {
		r := tooltest.Run(t, tooltest.Tool(t, "filter"), "--json", "--"+stat, "count << 60", "syscalls:sys_enter_write", "--where", "count == 4", "-c", tooltest.Writes(t, 4, 4))
		dec := json.NewDecoder(strings.NewReader(r.Stdout))
		dec.UseNumber()
		var rep struct {
			Values []map[string]any `json:"values"`
		}
		if err := dec.Decode(&rep); err != nil || r.Status != 0 || len(rep.Values) != 1 {
			t.Fatalf("--%s: exit %d, %v: %q %s", stat, r.Status, err, r.Stdout, r.Stderr)
		}
		if got := fmt.Sprint(rep.Values[0][stat]); got != w || fmt.Sprint(rep.Values[0]["count"]) != "4" {
			t.Errorf("--%s: %s over %v writes, want %s over 4", stat, got, rep.Values[0]["count"], w)
		}
	}
}
