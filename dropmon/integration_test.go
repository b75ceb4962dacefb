package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/internal/tooltest"
)

func TestMain(m *testing.M) { tooltest.Main(m) }

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

// udpRow finds the drops at __udp4_lib_rcv; other drops may happen on the
// machine meanwhile, so only that row is exact.
func TestUDPDropsExact(t *testing.T) {
	privtest.Require(t)
	const n = 41
	r := dropmon(t, "--json", "-c", tooltest.UDPDrops(t, n))
	if r.Status != 0 {
		t.Fatalf("exit %d: %s", r.Status, r.Stderr)
	}
	rep := parse(t, r.Stdout)
	var count uint64
	for _, d := range rep.Drops {
		if strings.HasPrefix(d.Symbol, "__udp4_lib_rcv+0x") {
			if d.Reason != "NO_SOCKET" {
				t.Errorf("reason %q, want NO_SOCKET", d.Reason)
			}
			if !regexp.MustCompile(`^0x[0-9a-f]{16}$`).MatchString(d.Location) {
				t.Errorf("location %q", d.Location)
			}
			count += d.Count
		}
	}
	if count != n {
		t.Errorf("%d drops at __udp4_lib_rcv, want exactly %d: %+v", count, n, rep.Drops)
	}
	if rep.Tool != "dropmon" || rep.Total < n {
		t.Errorf("tool %q total %d", rep.Tool, rep.Total)
	}

	// The text report says the same.
	text := dropmon(t, "-c", tooltest.UDPDrops(t, n))
	row := regexp.MustCompile(`(?m)^\s*(\d+)\s+__udp4_lib_rcv\+0x[0-9a-f]+\s+0x[0-9a-f]{16}\s+NO_SOCKET$`).FindStringSubmatch(text.Stdout)
	if row == nil || row[1] != "41" {
		t.Errorf("text report has no row of 41 NO_SOCKET drops at __udp4_lib_rcv:\n%s", text.Stdout)
	}
	if !strings.HasPrefix(text.Stdout, "COUNT  LOCATION") && !strings.Contains(text.Stdout, " COUNT  LOCATION") {
		t.Errorf("no header:\n%s", text.Stdout)
	}
}

func TestStacksShowUDPPath(t *testing.T) {
	privtest.Require(t)
	r := dropmon(t, "--json", "--stacks", "-c", tooltest.UDPDrops(t, 5))
	if r.Status != 0 {
		t.Fatalf("exit %d: %s", r.Status, r.Stderr)
	}
	for _, d := range parse(t, r.Stdout).Drops {
		if !strings.HasPrefix(d.Symbol, "__udp4_lib_rcv+") {
			continue
		}
		var sum uint64
		for _, s := range d.Stacks {
			sum += s.Count
			if !strings.Contains(strings.Join(s.Frames, " "), "__udp4_lib_rcv+") {
				t.Errorf("stack without __udp4_lib_rcv: %v", s.Frames)
			}
		}
		// One stack per key: the first claims the fast-path cache slot of the
		// location, the others go through the hash; together they add up.
		if len(d.Stacks) == 0 || sum > d.Count || len(d.Stacks) < 3 && sum != d.Count {
			t.Errorf("stacks %+v for %d drops", d.Stacks, d.Count)
		}
		return
	}
	t.Errorf("no __udp4_lib_rcv row: %s", r.Stdout)
}

func TestProtocolFilter(t *testing.T) {
	privtest.Require(t)
	// The datagrams are IPv4: an IPv6-only dropmon sees none of them.
	r := dropmon(t, "--json", "--protocol", "ipv6", "-c", tooltest.UDPDrops(t, 10))
	for _, d := range parse(t, r.Stdout).Drops {
		if strings.HasPrefix(d.Symbol, "__udp4_lib_rcv+") {
			t.Errorf("--protocol ipv6 counted IPv4 drops: %+v", d)
		}
	}
	r = dropmon(t, "--json", "--protocol", "ip", "--no-reason", "-c", tooltest.UDPDrops(t, 10))
	var got uint64
	for _, d := range parse(t, r.Stdout).Drops {
		if strings.HasPrefix(d.Symbol, "__udp4_lib_rcv+") {
			got += d.Count
			if d.Reason != "" {
				t.Errorf("--no-reason still reports %q", d.Reason)
			}
		}
	}
	if got != 10 {
		t.Errorf("--protocol ip: %d drops at __udp4_lib_rcv, want 10", got)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--protocol", "ipx"}, {"-n", "0"}, {"-n", "x"}, {"-1"}, {"1", "0"}, {"--bogus"},
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
