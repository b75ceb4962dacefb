package metrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// The server is net/http's: a goroutine per connection, so idle or slow
// clients, however many, never hold a scrape back; deadlines bound what
// each can cost.
const (
	readHeaderTimeout = 5 * time.Second  // a client that trickles its request head is cut off
	writeTimeout      = 60 * time.Second // the answer's time, the collection included
	idleTimeout       = 30 * time.Second // a kept-alive connection with no next request
	maxHeaderBytes    = 16 << 10
	shutdownGrace     = 300 * time.Millisecond // for answers under way when the tool ends
)

// Server serves the families collect returns at each scrape, with the
// process's own metrics (process_*: CPU, memory, descriptors) and the
// handler's (promhttp_*).
type Server struct {
	ln   net.Listener
	http *http.Server
	coll *collector
}

// ErrAddrInUse is returned by Listen when another socket holds the address.
var ErrAddrInUse = errors.New("the address is in use (another exporter, or another run of this one?): pick another port")

// ParseAddr parses a listening address: HOST:PORT, where HOST is an IPv4
// or [IPv6] address, "localhost" (127.0.0.1), or empty for every address;
// names are not resolved.
func ParseAddr(addr string) (netip.AddrPort, error) {
	i := strings.LastIndex(addr, ":")
	if i < 0 {
		return netip.AddrPort{}, fmt.Errorf("%q: want HOST:PORT, e.g. 127.0.0.1:9435 or :9435", addr)
	}
	host, port := addr[:i], addr[i+1:]
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("%q: the port is a number from 0 to 65535", addr)
	}
	var ip netip.Addr
	switch {
	case host == "":
		ip = netip.IPv6Unspecified()
	case host == "localhost":
		ip = netip.AddrFrom4([4]byte{127, 0, 0, 1})
	default:
		ip, err = netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
		if err != nil || ip.Zone() != "" || strings.Contains(host, ":") != strings.HasPrefix(host, "[") {
			return netip.AddrPort{}, fmt.Errorf("%q: HOST is an IP address (IPv6 in brackets), localhost, or empty for all; names are not resolved", addr)
		}
	}
	return netip.AddrPortFrom(ip, uint16(p)), nil
}

// Listen binds addr (see ParseAddr) and returns the server, not yet
// serving. ":PORT" takes IPv4 and IPv6.
func Listen(addr string, collect func() []Family) (*Server, error) {
	ap, err := ParseAddr(addr)
	if err != nil {
		return nil, err
	}
	ln, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(ap))
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, ErrAddrInUse
		}
		return nil, err
	}
	coll := newCollector(collect)
	reg := prometheus.NewRegistry()
	reg.MustRegister(coll, collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	handler := promhttp.InstrumentMetricHandler(reg, promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorHandling:     promhttp.HTTPErrorOnError, // a failed collection is a 500, never half a scrape
		EnableOpenMetrics: true,
	}))
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", handler)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, index)
	})
	s := &Server{ln: ln, coll: coll, http: &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: readHeaderTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		// A client's bad request or a reset connection is the client's
		// business: nothing goes to the tool's stderr.
		ErrorLog: log.New(io.Discard, "", 0),
	}}
	return s, nil
}

const index = `<html><head><title>tracekit</title></head><body>
<p><a href="/metrics">/metrics</a>: the counts, in the Prometheus text format or OpenMetrics</p>
<p><a href="/healthz">/healthz</a>: ok while the tool runs</p>
</body></html>
`

// Addr is the address the server listens on, its port resolved.
func (s *Server) Addr() string { return s.ln.Addr().(*net.TCPAddr).AddrPort().String() }

// Serve answers until Close.
func (s *Server) Serve() { _ = s.http.Serve(s.ln) }

// Close stops listening, gives the answers under way shutdownGrace to
// finish, then closes every connection, idle or not, and waits for a
// collection under way: once Close returns, no collection reads the maps.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	err := s.http.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = s.http.Close()
	}
	s.coll.close()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}
