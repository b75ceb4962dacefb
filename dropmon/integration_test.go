package dropmon

import (
	"encoding/json"
	"fmt"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/internal/tooltest"
	"github.com/tracekit/tracekit/procfs"
	"github.com/tracekit/tracekit/tracefs"
)

func TestMain(m *testing.M) { tooltest.Main(m) }

// udpFunc is the function the running kernel names for the drop of a
// datagram to a closed port: __udp4_lib_rcv, or where a kernel inlined it
// (7.2: into udp_rcv), its caller.
func udpFunc(t *testing.T) string {
	t.Helper()
	syms, err := procfs.LoadKallsyms()
	if err != nil {
		t.Fatal(err)
	}
	if syms.Has("__udp4_lib_rcv") {
		return "__udp4_lib_rcv"
	}
	return "udp_rcv"
}

// udpReason is the reason the running kernel gives that drop: NO_SOCKET
// where skb:kfree_skb has a reason field (5.17+), none before.
func udpReason(t *testing.T) string {
	t.Helper()
	f, err := tracefs.ReadFormat("skb", "kfree_skb")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := f.Field("reason"); ok {
		return "NO_SOCKET"
	}
	return ""
}

func dropmon(t *testing.T, args ...string) tooltest.Result {
	return tooltest.Run(t, tooltest.Tool(t, "dropmon"), args...)
}

type report struct {
	Tool  string `json:"tool"`
	Time  string `json:"time"`
	Total uint64 `json:"total"`
	Lost  uint64 `json:"lost"`
	Drops []struct {
		Location string `json:"location"`
		Symbol   string `json:"symbol"`
		Reason   string `json:"reason"`
		Count    uint64 `json:"count"`
		Stacks   []struct {
			Count  uint64   `json:"count"`
			Frames []string `json:"frames"`
		} `json:"stacks"`
	} `json:"drops"`
}

func parse(t *testing.T, out string) report {
	t.Helper()
	var r report
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 1 {
		t.Fatalf("want one JSON line, got %q", out)
	}
	if err := json.Unmarshal([]byte(lines[0]), &r); err != nil {
		t.Fatalf("not JSON: %q: %v", out, err)
	}
	return r
}

// The drops at the UDP receive function are exact; other drops may happen
// on the machine meanwhile.
func TestUDPDropsExact(t *testing.T) {
	privtest.Require(t)
	tooltest.ForEachHook(t, "kfree_skb", func(t *testing.T) {
		const n = 41
		r := dropmon(t, "--json", "-c", tooltest.UDPDrops(t, n))
		if r.Status != 0 {
			t.Fatalf("exit %d: %s", r.Status, r.Stderr)
		}
		fn, reason := udpFunc(t), udpReason(t)
		rep := parse(t, r.Stdout)
		var count uint64
		for _, d := range rep.Drops {
			if strings.HasPrefix(d.Symbol, fn+"+0x") {
				if d.Reason != reason {
					t.Errorf("reason %q, want %q (this kernel's kfree_skb format)", d.Reason, reason)
				}
				// A kernel address of 8 bytes, or of 4 on 32-bit ARM.
				if !regexp.MustCompile(fmt.Sprintf(`^0x[0-9a-f]{%d}$`, strconv.IntSize/4)).MatchString(d.Location) {
					t.Errorf("location %q", d.Location)
				}
				count += d.Count
			}
		}
		if count != n {
			t.Errorf("%d drops at %s, want exactly %d: %+v", count, fn, n, rep.Drops)
		}
		if rep.Tool != "dropmon" || rep.Total < n {
			t.Errorf("tool %q total %d", rep.Tool, rep.Total)
		}

		// The text report says the same.
		text := dropmon(t, "-c", tooltest.UDPDrops(t, n))
		tail := "" // no REASON column value before 5.17
		if reason != "" {
			tail = `\s+` + reason
		}
		row := regexp.MustCompile(`(?m)^\s*(\d+)\s+` + regexp.QuoteMeta(fn) + `\+0x[0-9a-f]+\s+0x[0-9a-f]{16}` + tail + `$`).FindStringSubmatch(text.Stdout)
		if row == nil || row[1] != "41" {
			t.Errorf("text report has no row of 41 %q drops at %s:\n%s", reason, fn, text.Stdout)
		}
		if !strings.HasPrefix(text.Stdout, "COUNT  LOCATION") && !strings.Contains(text.Stdout, " COUNT  LOCATION") {
			t.Errorf("no header:\n%s", text.Stdout)
		}
	})
}

func TestStacksShowUDPPath(t *testing.T) {
	privtest.Require(t)
	if runtime.GOARCH == "arm" {
		// The stacks cannot show it: the run says so, once.
		r := dropmon(t, "--json", "--stacks", "-c", tooltest.UDPDrops(t, 1))
		if r.Status != 0 || strings.Count(r.Stderr, "32-bit ARM's kernel walks a stack taken at a tracepoint no further than its first frame") != 1 {
			t.Errorf("exit %d, stderr %q: want the one-line notice", r.Status, r.Stderr)
		}
	}
	privtest.NeedTracepointStacks(t)
	tooltest.ForEachHook(t, "kfree_skb", func(t *testing.T) {
		r := dropmon(t, "--json", "--stacks", "-c", tooltest.UDPDrops(t, 5))
		if r.Status != 0 {
			t.Fatalf("exit %d: %s", r.Status, r.Stderr)
		}
		fn := udpFunc(t)
		for _, d := range parse(t, r.Stdout).Drops {
			if !strings.HasPrefix(d.Symbol, fn+"+") {
				continue
			}
			var sum uint64
			for _, s := range d.Stacks {
				sum += s.Count
				// The stack starts in the kernel's code: the function
				// that fires the tracepoint, then its caller (fn), never
				// the tracer's own frames (the program, bpf_trace_run4).
				at := slices.IndexFunc(s.Frames, func(f string) bool { return strings.HasPrefix(f, fn+"+") })
				if at < 0 || at > 2 || slices.ContainsFunc(s.Frames, procfs.TracerFrame) {
					t.Errorf("stack %v: want %s among its first 3 frames, and no frame of the tracer", s.Frames, fn)
				}
			}
			// One stack per key: the first claims the fast-path cache slot of the
			// location, the others go through the hash; together they add up.
			if len(d.Stacks) == 0 || sum > d.Count || len(d.Stacks) < 3 && sum != d.Count {
				t.Errorf("stacks %+v for %d drops", d.Stacks, d.Count)
			}
			return
		}
		t.Errorf("no %s row: %s", fn, r.Stdout)
	})
}

func TestProtocolFilter(t *testing.T) {
	privtest.Require(t)
	tooltest.ForEachHook(t, "kfree_skb", func(t *testing.T) {
		tooltest.RawNeedsBTF(t) // --protocol reads the skb
		// The datagrams are IPv4: an IPv6-only dropmon sees none of them.
		fn := udpFunc(t)
		r := dropmon(t, "--json", "--protocol", "ipv6", "-c", tooltest.UDPDrops(t, 10))
		for _, d := range parse(t, r.Stdout).Drops {
			if strings.HasPrefix(d.Symbol, fn+"+") {
				t.Errorf("--protocol ipv6 counted IPv4 drops: %+v", d)
			}
		}
		r = dropmon(t, "--json", "--protocol", "ip", "--no-reason", "-c", tooltest.UDPDrops(t, 10))
		var got uint64
		for _, d := range parse(t, r.Stdout).Drops {
			if strings.HasPrefix(d.Symbol, fn+"+") {
				got += d.Count
				if d.Reason != "" {
					t.Errorf("--no-reason still reports %q", d.Reason)
				}
			}
		}
		if got != 10 {
			t.Errorf("--protocol ip: %d drops at %s, want 10", got, fn)
		}
	})
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--protocol", "ipx"}, {"-n", "0"}, {"-n", "x"}, {"-1"}, {"1", "0"}, {"--bogus"}, {"--attach", "fentry"}, {"--json", "-T"},
	} {
		r := dropmon(t, args...)
		if r.Status != 2 || !strings.Contains(r.Stderr, "Try 'dropmon --help'") {
			t.Errorf("%v: exit %d, stderr %q", args, r.Status, r.Stderr)
		}
	}
	if r := dropmon(t, "--help"); r.Status != 0 || !strings.Contains(r.Stdout, "--stacks") {
		t.Errorf("--help: %d %q", r.Status, r.Stdout)
	}
}
