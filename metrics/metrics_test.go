package metrics

import (
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"

	"github.com/tracekit/tracekit/internal/golden"
)

func fixture() []Family {
	sum := 1234.5
	return []Family{
		{Name: "tk_drops", Help: "Packets dropped.\nBy \"reason\" \\ symbol.", Type: Counter, Metrics: []Metric{
			{Labels: []Label{{"symbol", "udp_rcv"}, {"reason", "NO_SOCKET"}}, Value: 41},
			{Labels: []Label{{"symbol", "other"}, {"reason", "NOT_SPECIFIED"}}, Value: 3},
			{Labels: []Label{{"symbol", "tcp_v4_rcv"}, {"reason", "a\"b\\c\nd\xff"}}, Value: 1e20},
		}},
		{Name: "tk_latency_seconds", Help: "IO latency.", Type: Histogram, Metrics: []Metric{
			{Labels: []Label{{"disk", "loop0"}}, Hist: &Hist{Bounds: []float64{1e-6, 2e-6, 4e-6, 1}, Counts: []uint64{0, 5, 2, 1, 0}}},
		}},
		{Name: "tk_bytes", Help: "Sizes.", Type: Histogram, Metrics: []Metric{
			{Hist: &Hist{Bounds: []float64{1, 3, 7}, Counts: []uint64{1, 0, 4, 2}, Sum: &sum}},
		}},
		{Name: "tk_up", Help: "Up.", Type: Gauge, Metrics: []Metric{{Value: 1}}},
		{Name: "tk_build", Help: "The build.", Type: Info, Metrics: []Metric{{Labels: []Label{{"version", "v1"}}}}},
	}
}

func TestExpositionGoldens(t *testing.T) {
	for name, format := range map[string]expfmt.Format{"text": TextFormat, "openmetrics": OpenMetricsFormat} {
		out, err := Exposition(fixture(), format)
		if err != nil {
			t.Fatal(err)
		}
		golden.Check(t, name, out)
	}
}

func TestLabelName(t *testing.T) {
	for in, want := range map[string]string{
		"comm": "comm", "skb->len": "skb_len", "args->filename": "args_filename",
		"((struct sk_buff *)skbaddr)->dev->name": "struct_sk_buff_skbaddr_dev_name",
		"str(args->filename)":                    "str_args_filename", "9x": "x9x", "__x": "x__x", "": "x",
	} {
		if got := LabelName(in); got != want {
			t.Errorf("LabelName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseAddr(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:9435": "127.0.0.1:9435", ":9435": "[::]:9435", "localhost:0": "127.0.0.1:0", "[::1]:80": "[::1]:80",
	} {
		got, err := ParseAddr(in)
		if err != nil || got.String() != want {
			t.Errorf("ParseAddr(%q) = %v, %v; want %s", in, got, err, want)
		}
	}
	for _, in := range []string{"", "9435", "example.com:80", "127.0.0.1:65536", "127.0.0.1:-1", "::1:80", "[fe80::1%eth0]:80", "1.2.3.4:x"} {
		if _, err := ParseAddr(in); err == nil {
			t.Errorf("ParseAddr(%q) accepted", in)
		}
	}
}

func get(t *testing.T, url, accept string) (int, string, string) {
	t.Helper()
	code, typ, body, err := fetch(url, accept)
	if err != nil {
		t.Fatal(err)
	}
	return code, typ, body
}

// fetch is get for a goroutine other than the test's, which may not call
// t.Fatal: the error is returned. Each request has a connection of its
// own.
func fetch(url, accept string) (int, string, string, error) {
	req, _ := http.NewRequest("GET", url, nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b), err
}

// serve starts a server of collect on a port of its own, closed at the
// test's end.
func serve(t *testing.T, collect func() []Family) *Server {
	t.Helper()
	s, err := Listen("127.0.0.1:0", collect)
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve()
	t.Cleanup(func() { s.Close() })
	return s
}

// holds reports whether body holds every line of the tool's families in
// format: the server adds the process's own families among them.
func holds(t *testing.T, body string, format expfmt.Format) bool {
	t.Helper()
	want, err := Exposition(fixture(), format)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSuffix(want, "\n"), "\n") {
		if !strings.Contains(body, line+"\n") {
			t.Logf("missing %q", line)
			return false
		}
	}
	return true
}

type counter struct {
	mu sync.Mutex
	n  int
}

func (c *counter) add() { c.mu.Lock(); c.n++; c.mu.Unlock() }
func (c *counter) get() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

func TestServer(t *testing.T) {
	var runs counter
	s := serve(t, func() []Family { runs.add(); return fixture() })
	base := "http://" + s.Addr()

	code, ctype, body := get(t, base+"/metrics", "")
	if code != 200 || !strings.HasPrefix(ctype, "text/plain; version=0.0.4") || !holds(t, body, TextFormat) || !strings.Contains(body, "process_resident_memory_bytes ") {
		t.Errorf("/metrics: %d %q\n%s", code, ctype, body)
	}
	code, ctype, body = get(t, base+"/metrics?x=1", "application/openmetrics-text;version=1.0.0,text/plain;q=0.5")
	if code != 200 || !strings.HasPrefix(ctype, "application/openmetrics-text") || !holds(t, body, OpenMetricsFormat) || !strings.HasSuffix(body, "# EOF\n") {
		t.Errorf("/metrics, OpenMetrics: %d %q\n%s", code, ctype, body)
	}
	if code, _, body := get(t, base+"/healthz", ""); code != 200 || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	if code, _, body := get(t, base+"/", ""); code != 200 || !strings.Contains(body, `href="/metrics"`) {
		t.Errorf("/: %d %q", code, body)
	}
	if code, _, _ := get(t, base+"/nothing", ""); code != 404 {
		t.Errorf("/nothing: %d", code)
	}
	resp, err := http.Post(base+"/metrics", "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 || resp.Header.Get("Allow") != "GET, HEAD" {
		t.Errorf("POST: %d, Allow %q", resp.StatusCode, resp.Header.Get("Allow"))
	}
	resp, err = http.Head(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("HEAD: %d", resp.StatusCode)
	}
	// gzip when asked (Go's client asks, and unpacks, by itself).
	req, _ := http.NewRequest("GET", base+"/metrics", nil)
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(resp.Body)
	if err != nil || resp.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("gzip: %v, Content-Encoding %q", err, resp.Header.Get("Content-Encoding"))
	}
	unzipped, _ := io.ReadAll(zr)
	resp.Body.Close()
	if !holds(t, string(unzipped), TextFormat) {
		t.Errorf("gzipped /metrics:\n%s", unzipped)
	}
	// One collection per scrape of /metrics, one after another (three GETs
	// and the HEAD); /, /healthz, a 404 and a refused POST read no map.
	if n := runs.get(); n != 4 {
		t.Errorf("%d collections for 4 scrapes one after another", n)
	}

	// 100 scrapes at once, each on a connection of its own.
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, _, body, err := fetch(base+"/metrics", "")
			if err == nil && (code != 200 || !strings.Contains(body, "tk_up 1\n")) {
				err = fmt.Errorf("status %d, %d bytes", code, len(body))
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent scrape: %v", err)
	}
	// Scrapes at once share a running collection: at least one, at most
	// one each.
	if n := runs.get() - 4; n < 1 || n > 100 {
		t.Errorf("100 concurrent scrapes ran %d collections", n)
	}

	if _, err := Listen(s.Addr(), fixture); !errors.Is(err, ErrAddrInUse) {
		t.Errorf("a second Listen on %s: %v, want ErrAddrInUse", s.Addr(), err)
	}
}

// Scrapes that come while a collection runs wait for it and share its
// result.
func TestScrapesShareACollection(t *testing.T) {
	release := make(chan struct{})
	var runs counter
	s := serve(t, func() []Family {
		runs.add()
		<-release
		return fixture()
	})
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if code, _, _, err := fetch("http://"+s.Addr()+"/metrics", ""); err != nil || code != 200 {
				t.Errorf("status %d: %v", code, err)
			}
		}()
	}
	for runs.get() != 1 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // every request in before the collection ends
	close(release)
	wg.Wait()
	if n := runs.get(); n > 2 {
		t.Errorf("20 scrapes at once ran %d collections", n)
	}
}

// A panic in a collection is a 500 for that scrape, with the reason; the
// next scrape is served.
func TestPanicInACollectionIsA500(t *testing.T) {
	var runs counter
	s := serve(t, func() []Family {
		runs.add()
		if runs.get() == 1 {
			var m map[string]int
			m["x"]++ // a nil map: the kind of bug a collector may have
		}
		return fixture()
	})
	code, _, body := get(t, "http://"+s.Addr()+"/metrics", "")
	if code != 500 || !strings.Contains(body, "internal error in the collection: assignment to entry in nil map") {
		t.Errorf("first scrape: %d %q", code, body)
	}
	if code, _, body := get(t, "http://"+s.Addr()+"/metrics", ""); code != 200 || !holds(t, body, TextFormat) {
		t.Errorf("second scrape: %d", code)
	}
}

// Idle connections, however many, starve no scrape: 1,200 held open (the
// hand-written server of old served 256 at a time, 10 s each), and every
// scrape meanwhile is answered at once; Close ends them all within a
// second.
func TestIdleConnectionsStarveNothing(t *testing.T) {
	s, err := Listen("127.0.0.1:0", fixture)
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve()
	var idle []net.Conn
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	for i := 0; i < 1200; i++ {
		c, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		idle = append(idle, c)
	}
	// A slow client, in the middle of its request head.
	slow, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	io.WriteString(slow, "GET /metrics HTTP/1.1\r\nHost: x\r\n")
	for i := 0; i < 5; i++ {
		start := time.Now()
		code, _, body, err := fetch("http://"+s.Addr()+"/metrics", "")
		if err != nil || code != 200 || !strings.Contains(body, "tk_up 1\n") || time.Since(start) > time.Second {
			t.Errorf("scrape %d with 1,200 idle connections: %d, %v, after %v", i, code, err, time.Since(start))
		}
		if code, _, _, err := fetch("http://"+s.Addr()+"/healthz", ""); err != nil || code != 200 {
			t.Errorf("/healthz with 1,200 idle connections: %d, %v", code, err)
		}
	}
	start := time.Now()
	if err := s.Close(); err != nil {
		t.Error(err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("Close with 1,200 idle connections took %v", took)
	}
	// Every connection was closed by the server: a read sees EOF at once.
	for _, c := range append(idle[:10:10], slow) {
		c.SetReadDeadline(time.Now().Add(time.Second))
		if n, err := c.Read(make([]byte, 512)); err != io.EOF {
			t.Errorf("a connection after Close: read %d, %v; want EOF", n, err)
		}
	}
}

// Malformed and oversized requests get their 4xx, and the server goes on.
func TestMalformedRequests(t *testing.T) {
	s := serve(t, fixture)
	for req, want := range map[string]string{
		"GARBAGE\r\n\r\n":                          "HTTP/1.1 400 ",
		"GET /metrics HTTP/9.9\r\nHost: x\r\n\r\n": "HTTP/1.1 505 ",
		"GET /metrics HTTP/1.1\r\n\r\n":            "HTTP/1.1 400 ", // HTTP/1.1 without Host
		"GET /metrics HTTP/1.1\r\nHost: x\r\nX: " + strings.Repeat("a", 64<<10) + "\r\n\r\n": "HTTP/1.1 431 ",
		"DELETE / HTTP/1.1\r\nHost: x\r\n\r\n":                                               "HTTP/1.1 405 ",
		"GET /metrics HTTP/1.0\r\n\r\n":                                                      "HTTP/1.0 200 ",
	} {
		c, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, req)
		line, err := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if !strings.HasPrefix(line, want) {
			t.Errorf("%.40q: %q, %v; want %q", req, line, err, want)
		}
	}
	if code, _, _ := get(t, "http://"+s.Addr()+"/metrics", ""); code != 200 {
		t.Errorf("a scrape after the bad requests: %d", code)
	}
}

// Close waits for a collection under way, and no collection starts after
// it: the tool frees its maps next.
func TestCloseWaitsForTheCollection(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var runs counter
	s, err := Listen("127.0.0.1:0", func() []Family {
		runs.add()
		if runs.get() == 1 {
			close(entered)
			<-release
		}
		return fixture()
	})
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve()
	go fetch("http://"+s.Addr()+"/metrics", "")
	<-entered
	closed := make(chan struct{})
	go func() { s.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("Close returned while a collection ran")
	case <-time.After(500 * time.Millisecond):
	}
	close(release)
	<-closed
	if _, err := s.coll.gather(); !errors.Is(err, errClosed) || runs.get() != 1 {
		t.Errorf("a collection after Close: %v, %d runs", err, runs.get())
	}
}
