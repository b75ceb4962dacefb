package filter

import (
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/tracekit/tracekit/filter/compile"
	"github.com/tracekit/tracekit/internal/golden"
	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/internal/promtest"
	"github.com/tracekit/tracekit/internal/tooltest"
)

// TestExpositionGoldens serves fixed map contents: --count, --count-by
// (string and number keys, a path's label name, the keys beyond
// --serve-top under "other") and --hist of a signed expression.
func TestExpositionGoldens(t *testing.T) {
	privtest.Require(t)
	var b strings.Builder
	write := func(c *collector) { b.WriteString(tooltest.Exposition(t, c.families())) }
	count := tooltest.Maps(t, map[string]*ebpf.MapSpec{"count": {Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 1}})
	tooltest.PutPerCPU(t, count.Maps["count"], uint32(0), 40, 2)
	write(&collector{ev: "net:netif_receive_skb", coll: count, act: compile.Action{Kind: compile.Count}})

	prog := &compile.Program{Columns: []compile.Column{{Name: "comm", String: true, Offset: 0, Size: 16}, {Name: "skb->len", Offset: 16, Size: 8}}, Size: 24, MaxKeys: 64, Swap: true}
	by := tooltest.Maps(t, compile.Maps(compile.CountBy, prog))
	for _, k := range []struct {
		comm string
		len  uint64
		n    uint64
	}{{"ping", 1028, 6}, {"sshd", 52, 30}, {"curl", 60, 1}, {"ping", 84, 2}} {
		key := make([]byte, 24)
		copy(key, k.comm)
		binary.LittleEndian.PutUint64(key[16:], k.len)
		if err := by.Maps["counts"].Put(key, k.n); err != nil {
			t.Fatal(err)
		}
	}
	tooltest.PutPerCPU(t, by.Maps["lost"], uint32(0), 4)
	table, err := newKeyTable(by, prog, 2, false)
	if err != nil {
		t.Fatal(err)
	}
	defer table.Close()
	write(&collector{ev: "net:netif_receive_skb", coll: by, prog: prog, act: compile.Action{Kind: compile.CountBy}, table: table})

	hist := tooltest.Maps(t, map[string]*ebpf.MapSpec{
		"hist": {Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 65},
		"neg":  {Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 1},
	})
	tooltest.PutPerCPU(t, hist.Maps["hist"], uint32(3), 9)
	tooltest.PutPerCPU(t, hist.Maps["neg"], uint32(0), 2)
	write(&collector{ev: "syscalls:sys_exit_read", coll: hist, prog: &compile.Program{Signed: true}, act: compile.Action{Kind: compile.Hist, Hist: compile.Operand{Text: "ret"}}})
	golden.Check(t, "expo", b.String())
}

// TestServeCount counts 37 writes of 4,567 bytes with --count --serve: a
// scrape says 37, as the final report does.
func TestServeCount(t *testing.T) {
	privtest.Require(t)
	tool := promtest.Serve(t, "filter", "127.0.0.1:0", "--count", "syscalls:sys_enter_write", "--where", "count == 4567")
	if out, err := exec.Command("/bin/sh", "-c", tooltest.Writes(t, 4567, 37)).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	resp, err := http.Get("http://" + tool.Addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := regexp.MustCompile(`(?m)^tracekit_filter_events_total\{event="syscalls:sys_enter_write"\} (\d+)$`).FindSubmatch(body)
	if m == nil || string(m[1]) != strconv.Itoa(37) {
		t.Errorf("want 37 events:\n%s", body)
	}
	if r := tooltest.Run(t, tooltest.Tool(t, "filter"), "--serve", "127.0.0.1:1", "syscalls:sys_enter_write"); r.Status != 2 || !regexp.MustCompile(`--serve exposes what filter counts`).MatchString(r.Stderr) {
		t.Errorf("--serve without an aggregation: exit %d: %s", r.Status, r.Stderr)
	}
	if r := tooltest.Run(t, tooltest.Tool(t, "filter"), "--count", "--serve", tool.Addr, "syscalls:sys_enter_write"); r.Status != 1 || r.Stderr != fmt.Sprintf("filter: --serve %s: the address is in use (another exporter, or another run of this one?): pick another port\n", tool.Addr) {
		t.Errorf("--serve on a taken address: exit %d: %q", r.Status, r.Stderr)
	}
}

// --serve drains the kernel's counts every second and at each scrape, so
// its hash holds a second's keys, not the run's: 200 files opened twice in
// five phases of 40, 1.1 s apart (a second holds two phases at most),
// under --max-keys 100 and --serve-top 10 come out as ten series and
// "other", 400 events in all, none lost. The old binary read the hash in
// place: it filled at the run's 10,240th key, and "other" stopped growing
// while the losses did.
func TestServeDrainsKeys(t *testing.T) {
	privtest.Require(t)
	dir := t.TempDir()
	files := phasedFiles(t, dir, 5, 40, 1100)
	tool := promtest.Serve(t, "filter", "127.0.0.1:0", "--count-by", "filename", "--max-keys", "100", "--serve-top", "10",
		"syscalls:sys_enter_openat", "--where", fmt.Sprintf(`filename ~ "%s/*"`, dir))
	if out, err := exec.Command("/bin/sh", "-c", tooltest.Opens(t, "", files...)).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	resp, err := http.Get("http://" + tool.Addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	series, sum, other := 0, 0, 0
	for _, m := range regexp.MustCompile(`(?m)^tracekit_filter_events_total\{event="syscalls:sys_enter_openat",filename="([^"]*)"\} (\d+)$`).FindAllSubmatch(body, -1) {
		n, _ := strconv.Atoi(string(m[2]))
		sum += n
		if string(m[1]) == "other" {
			other = n
		} else {
			series++
		}
	}
	lost := regexp.MustCompile(`(?m)^tracekit_lost_total\{tool="filter"\} 0$`).Match(body)
	if series != 10 || sum != 400 || other != 380 || !lost {
		t.Errorf("%d series, %d events, %d under other, lost 0: %v; want 10, 400, 380, true:\n%s", series, sum, other, lost, body)
	}
}
