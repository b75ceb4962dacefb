// Package promtest runs the tools with --serve under a real Prometheus
// (Debian's prometheus package, installed when missing) for the tests.
package promtest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tracekit/tracekit/internal/tooltest"
)

// Tool is a tool run serving metrics.
type Tool struct {
	Addr   string // where it serves, its port resolved
	cmd    *exec.Cmd
	stderr strings.Builder
	done   chan error
}

var servingRE = regexp.MustCompile(`serving metrics at http://(\S+)/metrics`)

// Serve starts tool with --serve addr and args, and returns once it
// serves. The test ends it, if it has not.
func Serve(t *testing.T, tool, addr string, args ...string) *Tool {
	t.Helper()
	cmd := exec.Command(tooltest.Tool(t, tool), append([]string{"--serve", addr}, args...)...)
	cmd.Stdout = io.Discard
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tl := &Tool{cmd: cmd, done: make(chan error, 1)}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pipe)
		sent := false
		for sc.Scan() {
			tl.stderr.WriteString(sc.Text() + "\n")
			if m := servingRE.FindStringSubmatch(sc.Text()); m != nil && !sent {
				found <- m[1]
				sent = true
			}
		}
		close(found)
		tl.done <- cmd.Wait()
	}()
	t.Cleanup(func() { tl.Stop(t) })
	select {
	case a, ok := <-found:
		if !ok {
			t.Fatalf("%s --serve %s ended: %s", tool, addr, tl.stderr.String())
		}
		tl.Addr = a
	case <-time.After(20 * time.Second):
		t.Fatalf("%s --serve %s: not serving after 20 s: %s", tool, addr, tl.stderr.String())
	}
	return tl
}

// Stop ends the tool with SIGTERM and waits for it: exit status 0.
func (tl *Tool) Stop(t *testing.T) {
	t.Helper()
	if tl.cmd.ProcessState != nil || tl.done == nil {
		return
	}
	// 15 s; in the kernel matrix's emulated guests (TRACEKIT_BIN), 45 s,
	// past the tool's own 30 s watchdog, whose verdict then shows: dropmon
	// with 10,000 locations once took more than 15 s to end in the 7.2
	// guest (its report and the tracepoints' teardown on one emulated CPU).
	bound := 15 * time.Second
	if os.Getenv("TRACEKIT_BIN") != "" {
		bound = 45 * time.Second
	}
	start := time.Now()
	tl.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-tl.done:
		if err != nil {
			t.Errorf("the tool ended with %v: %s", err, tl.stderr.String())
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Logf("the tool took %v to end on SIGTERM", took.Round(time.Millisecond))
		}
	case <-time.After(bound):
		tl.cmd.Process.Kill()
		t.Errorf("the tool did not end on SIGTERM within %v: %s", bound, tl.stderr.String())
	}
	tl.done = nil
}

// Caps are the tool's effective, permitted and bounding capability sets,
// from /proc/PID/status.
func (tl *Tool) Caps(t *testing.T) (eff, prm, bnd uint64) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", tl.Pid()))
	if err != nil {
		t.Fatal(err)
	}
	get := func(name string) uint64 {
		m := regexp.MustCompile(`(?m)^` + name + `:\s+([0-9a-f]+)$`).FindSubmatch(b)
		if m == nil {
			t.Fatalf("no %s in /proc/%d/status", name, tl.Pid())
		}
		v, _ := strconv.ParseUint(string(m[1]), 16, 64)
		return v
	}
	return get("CapEff"), get("CapPrm"), get("CapBnd")
}

// CheckCaps asserts that the serving tool dropped every capability but
// cap_bpf, and that one only where the kernel checks it on map reads by
// descriptor (unprivileged BPF disabled): on 6.4+ it is asked of the
// kernel, so where the sysctl is 0 nothing may be kept.
func (tl *Tool) CheckCaps(t *testing.T) {
	t.Helper()
	eff, prm, bnd := tl.Caps(t)
	const capBPF = 1 << 39
	b, _ := os.ReadFile("/proc/sys/kernel/unprivileged_bpf_disabled")
	allowed := eff == 0 || eff == capBPF && strings.TrimSpace(string(b)) != "0"
	if !allowed || prm != eff || bnd != eff {
		t.Errorf("capabilities during the run: CapEff %#x, CapPrm %#x, CapBnd %#x; want none, or cap_bpf alone (%#x) where unprivileged BPF is disabled (%q)", eff, prm, bnd, uint64(capBPF), strings.TrimSpace(string(b)))
	}
	t.Logf("CapEff during the run: %#x", eff)
}

// Pid is the tool's process id.
func (tl *Tool) Pid() int { return tl.cmd.Process.Pid }

// Server is a Prometheus scraping targets every second.
type Server struct {
	URL string
}

// Start runs Prometheus on 127.0.0.1, a scrape a second of targets (job
// "tracekit"), data in a temporary directory. Inside the kernel matrix's
// guests, which have no package manager, the test is skipped: it runs on
// the host.
func Start(t *testing.T, targets ...string) *Server {
	t.Helper()
	bin := tooltest.Peer(t, "prometheus", "--no-install-recommends prometheus") // not the node exporter, which would start a daemon
	if bin == "" {
		t.Skip("no Prometheus in the kernel matrix's guests: this test runs on the host")
	}
	dir := t.TempDir()
	quoted := make([]string, len(targets))
	for i, tg := range targets {
		quoted[i] = strconv.Quote(tg)
	}
	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\nscrape_configs:\n  - job_name: tracekit\n    static_configs:\n      - targets: [%s]\n", strings.Join(quoted, ", "))
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		if t.Failed() {
			t.Logf("prometheus:\n%s", logs.String())
		}
	})
	s := &Server{URL: "http://" + addr}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(s.URL + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready after 30 s: %v\n%s", err, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Sample is one value of a query's result.
type Sample struct {
	Labels map[string]string
	Time   float64 // seconds
	Value  float64
}

// Query evaluates an instant query at time at (seconds; 0 for now) and
// returns its samples; a range vector's (QUERY[5m]) every sample.
func (s *Server) Query(t *testing.T, q string, at float64) []Sample {
	t.Helper()
	v := url.Values{"query": {q}}
	if at != 0 {
		v.Set("time", strconv.FormatFloat(at, 'f', 3, 64))
	}
	resp, err := http.Get(s.URL + "/api/v1/query?" + v.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Value  []any             `json:"value"`
				Values [][]any           `json:"values"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || r.Status != "success" {
		t.Fatalf("query %s: %v %s", q, err, r.Error)
	}
	var out []Sample
	for _, res := range r.Data.Result {
		pairs := res.Values
		if res.Value != nil {
			pairs = [][]any{res.Value}
		}
		for _, p := range pairs {
			ts, _ := p[0].(float64)
			str, _ := p[1].(string)
			val, _ := strconv.ParseFloat(str, 64)
			out = append(out, Sample{Labels: res.Metric, Time: ts, Value: val})
		}
	}
	return out
}

// Scalar is the value of a query with one sample, NaN-free; ok is false
// when it has none.
func (s *Server) Scalar(t *testing.T, q string) (float64, bool) {
	t.Helper()
	r := s.Query(t, q, 0)
	if len(r) != 1 {
		return 0, false
	}
	return r[0].Value, true
}

// WaitFor polls q until cond holds of its one sample's value (or of 0
// when it has none), for up to 20 s, and returns the last value.
func (s *Server) WaitFor(t *testing.T, q string, cond func(float64) bool) float64 {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		v, _ := s.Scalar(t, q)
		if cond(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20 s, %s is %v", q, v)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// WaitScrapes waits until Prometheus has scraped the target n more times
// successfully.
func (s *Server) WaitScrapes(t *testing.T, target string, n int) {
	t.Helper()
	q := fmt.Sprintf(`sum_over_time(up{job="tracekit",instance=%q}[1h])`, target)
	before, _ := s.Scalar(t, q)
	s.WaitFor(t, q, func(v float64) bool { return v >= before+float64(n) })
}
