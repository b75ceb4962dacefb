package metrics

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The server answers GET and HEAD of /metrics, /healthz and /, one request
// per connection (Connection: close), on a socket of its own: Go's net
// package would add half a megabyte to the binary for what Prometheus
// needs of HTTP. Sockets are non-blocking and wrapped in os.File, so reads,
// writes, deadlines and accept wait in Go's poller as net's do.
const (
	maxConns    = 256              // requests served at once; more wait in the backlog
	maxHead     = 16 << 10         // bytes of request line and headers
	ioTimeout   = 10 * time.Second // to read a request, and to write its answer
	listenQueue = 1024
)

// Server serves the families collect returns at each scrape.
type Server struct {
	addr    string
	ln      *os.File
	collect func() []Family
	mu      sync.Mutex
	flight  *flight // the collection under way, if any
	conns   chan struct{}
	wg      sync.WaitGroup
}

// flight is one run of collect, shared by the scrapes that wait for it.
type flight struct {
	done     chan struct{}
	families []Family
}

// gather runs collect, or waits for the run under way and shares its
// result: collectors keep state and run one at a time, and a hundred
// scrapes at once cost about one collection, not a hundred in a row.
func (s *Server) gather() []Family {
	s.mu.Lock()
	if f := s.flight; f != nil {
		s.mu.Unlock()
		<-f.done
		return f.families
	}
	f := &flight{done: make(chan struct{})}
	s.flight = f
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.flight = nil
		s.mu.Unlock()
		close(f.done)
	}()
	f.families = s.collect()
	return f.families
}

// ErrAddrInUse is returned by Listen when another socket holds the address.
var ErrAddrInUse = errors.New("the address is in use (another exporter, or another run of this one?): pick another port")

// ParseAddr parses a listening address: HOST:PORT, where HOST is an IPv4
// or [IPv6] address, "localhost" (127.0.0.1), or empty for every address;
// names are not resolved.
func ParseAddr(addr string) (netip.AddrPort, error) {
	host, port, ok := cutLast(addr, ":")
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("%q: want HOST:PORT, e.g. 127.0.0.1:9435 or :9435", addr)
	}
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

func cutLast(s, sep string) (string, string, bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}

// Listen binds addr (see ParseAddr) and returns the server, not yet
// serving.
func Listen(addr string, collect func() []Family) (*Server, error) {
	ap, err := ParseAddr(addr)
	if err != nil {
		return nil, err
	}
	family, sa := unix.AF_INET6, unix.Sockaddr(&unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()})
	if ap.Addr().Is4() {
		family, sa = unix.AF_INET, &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socket: %w", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("socket: %w", err)
	}
	if family == unix.AF_INET6 {
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 0) // ":PORT" takes IPv4 too
	}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		if errors.Is(err, unix.EADDRINUSE) {
			return nil, ErrAddrInUse
		}
		return nil, fmt.Errorf("bind: %w", err)
	}
	if err := unix.Listen(fd, listenQueue); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("listen: %w", err)
	}
	bound, err := unix.Getsockname(fd)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("getsockname: %w", err)
	}
	s := &Server{ln: os.NewFile(uintptr(fd), "metrics listener"), collect: collect, conns: make(chan struct{}, maxConns)}
	switch a := bound.(type) {
	case *unix.SockaddrInet4:
		s.addr = netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port)).String()
	case *unix.SockaddrInet6:
		s.addr = netip.AddrPortFrom(netip.AddrFrom16(a.Addr), uint16(a.Port)).String()
	}
	return s, nil
}

// Addr is the address the server listens on, its port resolved.
func (s *Server) Addr() string { return s.addr }

// Serve accepts connections until Close.
func (s *Server) Serve() {
	rc, err := s.ln.SyscallConn()
	if err != nil {
		return
	}
	for {
		var nfd int
		var aerr error
		err := rc.Read(func(fd uintptr) bool {
			nfd, _, aerr = unix.Accept4(int(fd), unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
			return aerr != unix.EAGAIN
		})
		if err != nil {
			return // closed
		}
		if aerr != nil {
			if aerr == unix.EMFILE || aerr == unix.ENFILE || aerr == unix.ENOBUFS || aerr == unix.ENOMEM {
				time.Sleep(10 * time.Millisecond) // out of descriptors: let answers finish
			}
			continue // ECONNABORTED and the like: that client is gone
		}
		s.conns <- struct{}{}
		s.wg.Add(1)
		go func() {
			defer func() { <-s.conns; s.wg.Done() }()
			c := os.NewFile(uintptr(nfd), "metrics connection")
			defer c.Close()
			s.answer(c)
		}()
	}
}

// Close stops accepting and waits for the answers under way.
func (s *Server) Close() error {
	err := s.ln.Close()
	s.wg.Wait()
	return err
}

// request is what the server uses of an HTTP request.
type request struct {
	method, path, accept string
}

// readRequest reads a request's head: the request line and the headers, up
// to the blank line.
func readRequest(c *os.File) (*request, int) {
	buf := make([]byte, maxHead)
	n := 0
	for {
		if i := bytes.Index(buf[:n], []byte("\r\n\r\n")); i >= 0 {
			n = i
			break
		}
		if i := bytes.Index(buf[:n], []byte("\n\n")); i >= 0 {
			n = i
			break
		}
		if n == len(buf) {
			return nil, 431
		}
		k, err := c.Read(buf[n:])
		n += k
		if err != nil {
			return nil, 0 // gone, or too slow: no answer
		}
	}
	buf = buf[:n]
	lines := strings.Split(strings.ReplaceAll(string(buf), "\r\n", "\n"), "\n")
	parts := strings.Split(lines[0], " ")
	if len(parts) != 3 || !strings.HasPrefix(parts[2], "HTTP/1.") || !strings.HasPrefix(parts[1], "/") {
		return nil, 400
	}
	r := &request{method: parts[0], path: parts[1]}
	if i := strings.IndexByte(r.path, '?'); i >= 0 {
		r.path = r.path[:i]
	}
	for _, h := range lines[1:] {
		name, value, ok := strings.Cut(h, ":")
		if ok && strings.EqualFold(strings.TrimSpace(name), "Accept") {
			r.accept = strings.TrimSpace(value)
		}
	}
	return r, 200
}

const index = `<html><head><title>tracekit</title></head><body>
<p><a href="/metrics">/metrics</a>: the counts, in the Prometheus text format or OpenMetrics</p>
<p><a href="/healthz">/healthz</a>: ok while the tool runs</p>
</body></html>
`

func (s *Server) answer(c *os.File) {
	_ = c.SetDeadline(time.Now().Add(ioTimeout))
	r, status := readRequest(c)
	if r == nil {
		if status != 0 {
			reply(c, status, "text/plain; charset=utf-8", nil, []byte(statusText(status)+"\n"), true)
		}
		return
	}
	body := r.method != "HEAD"
	if r.method != "GET" && r.method != "HEAD" {
		reply(c, 405, "text/plain; charset=utf-8", []string{"Allow: GET, HEAD"}, []byte("GET or HEAD\n"), true)
		return
	}
	switch r.path {
	case "/metrics":
		format := Negotiate(r.accept)
		var out bytes.Buffer
		families := s.gather()
		_ = c.SetWriteDeadline(time.Now().Add(ioTimeout)) // the answer's own time, however long the collection took
		if err := Write(&out, format, families); err != nil {
			reply(c, 500, "text/plain; charset=utf-8", nil, []byte(err.Error()+"\n"), body)
			return
		}
		reply(c, 200, format, nil, out.Bytes(), body)
	case "/healthz":
		reply(c, 200, "text/plain; charset=utf-8", nil, []byte("ok\n"), body)
	case "/":
		reply(c, 200, "text/html; charset=utf-8", nil, []byte(index), body)
	default:
		reply(c, 404, "text/plain; charset=utf-8", nil, []byte("not found: try /metrics\n"), body)
	}
}

func statusText(code int) string {
	switch code {
	case 200:
		return "OK"
	case 400:
		return "Bad Request"
	case 404:
		return "Not Found"
	case 405:
		return "Method Not Allowed"
	case 431:
		return "Request Header Fields Too Large"
	}
	return "Internal Server Error"
}

func reply(c *os.File, code int, ctype string, extra []string, content []byte, body bool) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n", code, statusText(code), ctype, len(content))
	for _, h := range extra {
		b.WriteString(h + "\r\n")
	}
	b.WriteString("\r\n")
	if body {
		b.Write(content)
	}
	_, _ = c.Write(b.Bytes())
}
