// Package tooltest runs the toolkit's binaries in tests, and turns the test
// binary itself into exact workloads (N writes, N dropped datagrams) that
// a -c command can run.
package tooltest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// Main runs a workload when the environment asks for one, else the tests.
// Call it from TestMain.
func Main(m *testing.M) {
	if spec := os.Getenv("TK_WRITES"); spec != "" {
		os.Exit(exactWrites(spec))
	}
	if n := os.Getenv("TK_UDP_DROPS"); n != "" {
		os.Exit(udpDrops(n))
	}
	os.Exit(m.Run())
}

// Writes is the shell command for exactly n write(2) calls of size bytes.
func Writes(t testing.TB, size, n int) string {
	return fmt.Sprintf("TK_WRITES=%d:%d %s", size, n, self(t))
}

// UDPDrops is the shell command that sends n UDP datagrams to a closed port
// on 127.0.0.1 inside a fresh network namespace: exactly n kfree_skb drops
// at __udp4_lib_rcv with reason NO_SOCKET.
func UDPDrops(t testing.TB, n int) string {
	return fmt.Sprintf("TK_UDP_DROPS=%d %s", n, self(t))
}

func self(t testing.TB) string {
	p, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// exactWrites makes exactly N writes of S bytes to /dev/null. It opens the
// file with a raw syscall so that the Go runtime's poller (whose wake-ups are
// writes to an eventfd) never starts. With TK_WAIT_FD it first blocks until
// one byte arrives on that fd.
func exactWrites(spec string) int {
	var size, n int
	if _, err := fmt.Sscanf(spec, "%d:%d", &size, &n); err != nil {
		return 3
	}
	if wait := os.Getenv("TK_WAIT_FD"); wait != "" {
		fd, _ := strconv.Atoi(wait)
		var b [1]byte
		if _, err := unix.Read(fd, b[:]); err != nil {
			return 4
		}
	}
	fd, err := unix.Open("/dev/null", unix.O_WRONLY, 0)
	if err != nil {
		return 5
	}
	buf := make([]byte, size)
	for i := 0; i < n; i++ {
		if _, err := unix.Write(fd, buf); err != nil {
			return 6
		}
	}
	return 0
}

func udpDrops(arg string) int {
	n, err := strconv.Atoi(arg)
	if err != nil {
		return 3
	}
	// A namespace belongs to the thread that unshares: stay on it.
	runtime.LockOSThread()
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		fmt.Fprintln(os.Stderr, "unshare:", err)
		return 4
	}
	ctl, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
	if err != nil {
		return 5
	}
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return 5
	}
	ifr.SetUint16(unix.IFF_UP | unix.IFF_LOOPBACK | unix.IFF_RUNNING)
	if err := unix.IoctlIfreq(ctl, unix.SIOCSIFFLAGS, ifr); err != nil {
		fmt.Fprintln(os.Stderr, "lo up:", err)
		return 6
	}
	to := &unix.SockaddrInet4{Port: 9, Addr: [4]byte{127, 0, 0, 1}}
	for i := 0; i < n; i++ {
		if err := unix.Sendto(ctl, []byte("drop me"), 0, to); err != nil {
			fmt.Fprintln(os.Stderr, "sendto:", err)
			return 7
		}
	}
	return 0
}

var (
	buildMu sync.Mutex
	built   = map[string]string{}
)

// Tool returns the path of a tool's binary: $TRACEKIT_BIN/NAME when set
// (prebuilt, as in the kernel matrix), else built once from ../NAME.
func Tool(t testing.TB, name string) string {
	t.Helper()
	if d := os.Getenv("TRACEKIT_BIN"); d != "" {
		return filepath.Join(d, name)
	}
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := built[name]; ok {
		return p
	}
	dir, err := os.MkdirTemp("", "tracekit-test")
	if err != nil {
		t.Fatal(err)
	}
	// World-readable, so that unprivileged runs can execute it too.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	out, err := exec.Command("go", "build", "-o", p, "../"+name).CombinedOutput()
	if err != nil {
		t.Fatalf("build %s: %v\n%s", name, err, out)
	}
	built[name] = p
	return p
}

// Result is what a tool run printed and its exit status.
type Result struct {
	Stdout, Stderr string
	Status         int
}

// Run runs a binary to completion.
func Run(t testing.TB, bin string, args ...string) Result {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	status := 0
	if ee, ok := err.(*exec.ExitError); ok {
		status = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return Result{out.String(), errb.String(), status}
}
