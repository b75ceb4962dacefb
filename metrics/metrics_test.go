package metrics

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

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
	for name, format := range map[string]string{"text": TextType, "openmetrics": OpenMetricsType} {
		var b bytes.Buffer
		if err := Write(&b, format, fixture()); err != nil {
			t.Fatal(err)
		}
		golden.Check(t, name, b.String())
	}
}

func TestNegotiate(t *testing.T) {
	for accept, want := range map[string]string{
		"": TextType,
		"text/plain;version=0.0.4;q=0.5,*/*;q=0.1": TextType,
		"application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1": OpenMetricsType,
		"Application/OpenMetrics-Text": OpenMetricsType,
	} {
		if got := Negotiate(accept); got != want {
			t.Errorf("Negotiate(%q) = %q, want %q", accept, got, want)
		}
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
// t.Fatal: the error is returned.
func fetch(url, accept string) (int, string, string, error) {
	req, _ := http.NewRequest("GET", url, nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b), err
}

func TestServer(t *testing.T) {
	var mu sync.Mutex
	scrapes := 0
	s, err := Listen("127.0.0.1:0", func() []Family {
		mu.Lock()
		scrapes++
		mu.Unlock()
		return fixture()
	})
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve()
	defer s.Close()
	base := "http://" + s.Addr()

	code, ctype, body := get(t, base+"/metrics", "")
	var want bytes.Buffer
	Write(&want, TextType, fixture())
	if code != 200 || ctype != TextType || body != want.String() {
		t.Errorf("/metrics: %d %q\n%s", code, ctype, body)
	}
	code, ctype, body = get(t, base+"/metrics?x=1", "application/openmetrics-text;version=1.0.0,text/plain;q=0.5")
	if code != 200 || ctype != OpenMetricsType || !strings.HasSuffix(body, "# EOF\n") {
		t.Errorf("/metrics, OpenMetrics: %d %q\n%s", code, ctype, body)
	}
	if code, _, body := get(t, base+"/healthz", ""); code != 200 || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
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
	if resp.StatusCode != 200 || resp.ContentLength != int64(want.Len()) {
		t.Errorf("HEAD: %d, length %d, want %d", resp.StatusCode, resp.ContentLength, want.Len())
	}
	collections := func() int {
		mu.Lock()
		defer mu.Unlock()
		return scrapes
	}
	// One collection per scrape of /metrics, one after another (two GETs
	// and the HEAD); /healthz, a 404 and a refused POST read no map.
	if n := collections(); n != 3 {
		t.Errorf("%d collections for 3 scrapes one after another", n)
	}

	// 100 scrapes at once, each on a connection of its own.
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tr := &http.Transport{DisableKeepAlives: true}
			resp, err := (&http.Client{Transport: tr}).Get(base + "/metrics")
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 200 || string(b) != want.String() {
				errs <- fmt.Errorf("status %d, %d bytes", resp.StatusCode, len(b))
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
	if n := collections() - 3; n < 1 || n > 100 {
		t.Errorf("100 concurrent scrapes ran %d collections", n)
	}

	if _, err := Listen(s.Addr(), fixture); !errors.Is(err, ErrAddrInUse) {
		t.Errorf("a second Listen on %s: %v, want ErrAddrInUse", s.Addr(), err)
	}
}

// TestScrapesShareACollection: scrapes that come while a collection runs
// wait for it and share its result.
func TestScrapesShareACollection(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	runs := 0
	s, err := Listen("127.0.0.1:0", func() []Family {
		mu.Lock()
		runs++
		mu.Unlock()
		<-release
		return fixture()
	})
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve()
	defer s.Close()
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
	// Let every request in before the collection ends.
	for {
		mu.Lock()
		n := runs
		mu.Unlock()
		if n == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	close(release)
	wg.Wait()
	if runs > 2 {
		t.Errorf("20 scrapes at once ran %d collections", runs)
	}
}
