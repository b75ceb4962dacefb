// Package tooltest runs the toolkit's binaries in tests, and turns the test
// binary itself into exact workloads (N writes, N dropped datagrams) that
// a -c command can run.
package tooltest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/prometheus/common/expfmt"

	"golang.org/x/sys/unix"

	"github.com/cilium/ebpf"
	bpf "github.com/cilium/ebpf/asm"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/hook"
	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/metrics"
	"github.com/tracekit/tracekit/proctree"
	"github.com/tracekit/tracekit/tracefs"
)

// mainRuns says that Main runs this test binary.
var mainRuns bool

// Main runs a workload when the environment asks for one, else the tests.
// Call it from TestMain.
func Main(m *testing.M) {
	mainRuns = true
	if spec := os.Getenv("TK_WRITES"); spec != "" {
		os.Exit(exactWrites(spec))
	}
	if n := os.Getenv("TK_UDP_DROPS"); n != "" {
		os.Exit(udpDrops(n, false))
	}
	if n := os.Getenv("TK_UDP6_DROPS"); n != "" {
		os.Exit(udpDrops(n, true))
	}
	if spec := os.Getenv("TK_PING"); spec != "" {
		os.Exit(ping(spec))
	}
	if spec := os.Getenv("TK_UDP_SIZES"); spec != "" {
		os.Exit(udpSizes(spec))
	}
	if spec := os.Getenv("TK_OPENS"); spec != "" {
		os.Exit(opens(spec, os.Getenv("TK_COMM")))
	}
	if spec := os.Getenv("TK_CALLS"); spec != "" {
		os.Exit(calls(spec, os.Getenv("TK_COMM")))
	}
	if n := os.Getenv("TK_THREADS"); n != "" {
		os.Exit(threads(n))
	}
	if secs := os.Getenv("TK_SPIN_THREAD"); secs != "" {
		os.Exit(spinThread(secs))
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
	lockNet(t)
	return fmt.Sprintf("TK_UDP_DROPS=%d %s", n, self(t))
}

// UDP6Drops is UDPDrops over IPv6, to [::1]: drops at __udp6_lib_rcv
// (or where the kernel inlined it), which no other test makes.
func UDP6Drops(t testing.TB, n int) string {
	lockNet(t)
	return fmt.Sprintf("TK_UDP6_DROPS=%d %s", n, self(t))
}

// Threads is the shell command for a process whose n threads each name
// themselves "tkthread" and exit while the process lives on: the kernel
// releases each before its last switch away (sched_switch), whose sample
// then has no thread id (-1).
func Threads(t testing.TB, n int) string {
	return fmt.Sprintf("TK_THREADS=%d %s", n, self(t))
}

func threads(arg string) int {
	n, err := strconv.Atoi(arg)
	if err != nil {
		return 2
	}
	for i := 0; i < n; i++ {
		done := make(chan struct{})
		go func() {
			defer close(done)
			// Locked and never unlocked: the thread exits with the
			// goroutine.
			runtime.LockOSThread()
			unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&[]byte("tkthread\x00")[0])), 0, 0, 0)
		}()
		<-done
	}
	time.Sleep(100 * time.Millisecond) // every thread gone, the process still here
	return 0
}

// SpinThread is the command for a process whose main thread sleeps
// while a second thread spins, for secs seconds: it first prints "TID1
// TID2", the sleeper's thread id and the spinner's (profile -L).
func SpinThread(t testing.TB, secs int) string {
	return fmt.Sprintf("TK_SPIN_THREAD=%d %s", secs, self(t))
}

func spinThread(arg string) int {
	secs, err := strconv.Atoi(arg)
	if err != nil {
		return 2
	}
	runtime.LockOSThread() // the main thread, asleep from here on
	tids := make(chan int)
	go func() {
		runtime.LockOSThread()
		tids <- unix.Gettid()
		for end := time.Now().Add(time.Duration(secs) * time.Second); time.Now().Before(end); {
		}
	}()
	fmt.Printf("%d %d\n", unix.Gettid(), <-tids)
	time.Sleep(time.Duration(secs) * time.Second)
	return 0
}

// Open is a file a workload opens Times times; with no Path, a pause of
// Times milliseconds.
type Open struct {
	Path  string
	Times int
	// Missing: the path does not exist, and each open fails with ENOENT
	// (a known outcome for a call's return value).
	Missing bool
	// Flags are added to O_RDONLY (known values in a structure the
	// kernel builds from them: do_sys_openat2's open_how).
	Flags int
	// Wait: before this file's opens, print the opening thread's id on
	// stdout and wait for a byte on stdin (tracers that attach to a
	// running process, then say go).
	Wait bool
}

// Opens is the shell command that opens each file its number of times
// (openat(2), then close), as a process named comm (prctl PR_SET_NAME)
// when comm is not "". Paths must not hold ',' or ':'.
func Opens(t testing.TB, comm string, files ...Open) string {
	var parts []string
	for _, f := range files {
		if strings.ContainsAny(f.Path, ",: '") {
			t.Fatalf("workload path %q holds ',', ':', ' ' or a quote", f.Path)
		}
		mark := ""
		if f.Wait {
			mark = "?"
		}
		if f.Missing {
			mark += "!"
		}
		parts = append(parts, fmt.Sprintf("%s%s:%d:%d", mark, f.Path, f.Times, f.Flags))
	}
	env, err := exec.LookPath("env")
	if err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(comm, "'") {
		t.Fatalf("workload comm %q holds a single quote", comm)
	}
	if strings.Trim(comm, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") != "" {
		comm = "'" + comm + "'" // for sh -c; bpftrace's -c takes plain names only
	}
	return fmt.Sprintf("%s TK_COMM=%s TK_OPENS=%s %s", env, comm, strings.Join(parts, ","), self(t))
}

func opens(spec, comm string) int {
	if comm != "" {
		// A thread's name: stay on the thread that is renamed.
		runtime.LockOSThread()
		name, err := unix.BytePtrFromString(comm)
		if err != nil {
			return 3
		}
		if err := unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(name)), 0, 0, 0); err != nil {
			return 3
		}
	}
	for _, part := range strings.Split(spec, ",") {
		f := strings.Split(part, ":")
		if len(f) != 3 {
			return 3
		}
		path, wait := strings.CutPrefix(f[0], "?")
		path, missing := strings.CutPrefix(path, "!")
		times, err := strconv.Atoi(f[1])
		flags, err2 := strconv.Atoi(f[2])
		if err != nil || err2 != nil {
			return 3
		}
		if wait {
			// The thread that opens is the one named: stay on it.
			runtime.LockOSThread()
			fmt.Println(unix.Gettid())
			if _, err := os.Stdin.Read(make([]byte, 1)); err != nil {
				return 3
			}
		}
		if path == "" {
			time.Sleep(time.Duration(times) * time.Millisecond)
			continue
		}
		for i := 0; i < times; i++ {
			fd, err := unix.Open(path, unix.O_RDONLY|flags, 0)
			if missing && err == unix.ENOENT {
				continue
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, path, err)
				return 4
			}
			unix.Close(fd)
		}
	}
	return 0
}

// LoopDevice attaches a loop device to a temporary file and detaches it
// when the test ends, failed or not.
func LoopDevice(t testing.TB) string {
	t.Helper()
	img := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 32<<20); err != nil {
		t.Fatal(err)
	}
	// "losetup -f" then "losetup DEV FILE": busybox (in the kernel matrix)
	// has no --show.
	out, err := exec.Command("losetup", "-f").CombinedOutput()
	if err != nil {
		t.Fatalf("losetup -f: %v: %s", err, out)
	}
	dev := strings.TrimSpace(string(out))
	if out, err := exec.Command("losetup", dev, img).CombinedOutput(); err != nil {
		t.Fatalf("losetup %s: %v: %s", dev, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
			t.Errorf("losetup -d %s: %v: %s", dev, err, out)
		}
	})
	return dev
}

// Peer returns the path of a peer tool (bpftrace), installing its Debian
// package when it is missing; "" inside the kernel matrix's guests, which
// have no package manager (the comparison runs on the host).
func Peer(t testing.TB, name, pkg string) string {
	t.Helper()
	if os.Getenv("TRACEKIT_BIN") != "" {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
		return ""
	}
	Install(t, pkg, func() bool { _, err := exec.LookPath(name); return err == nil })
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s installed, yet %s is not on PATH", pkg, name)
	}
	return p
}

// Install installs Debian packages unless have says they are there.
func Install(t testing.TB, pkgs string, have func() bool) {
	t.Helper()
	peerMu.Lock()
	defer peerMu.Unlock()
	if have() {
		return
	}
	t.Logf("installing %s from Debian's packages", pkgs)
	cmd := exec.Command("sh", "-c", "apt-get update -qq && apt-get install -y -qq "+pkgs)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("install %s: %v\n%s", pkgs, err, out)
	}
	if !have() {
		t.Fatalf("%s installed, yet still missing", pkgs)
	}
}

var peerMu sync.Mutex

func self(t testing.TB) string {
	t.Helper()
	if !mainRuns {
		// Without it the workload would run the tests again, each
		// waiting on the next.
		t.Fatal("a workload runs the test binary: the package's TestMain must call tooltest.Main")
	}
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

// Ping is the shell command that sends n ICMP echo requests with a payload
// of size bytes to 127.0.0.1 in a fresh network namespace and waits for the
// n replies: exactly 2n packets cross lo, each 28+size bytes long at
// netif_receive_skb.
func Ping(t testing.TB, n, size int) string {
	lockNet(t)
	return fmt.Sprintf("TK_PING=%d:%d %s", n, size, self(t))
}

// UDPSizes is the shell command that sends datagrams of the given payload
// sizes (each size count times, "200x5,10x7") to a socket listening on
// 127.0.0.1 in a fresh network namespace: no drops, no ICMP.
func UDPSizes(t testing.TB, spec string) string {
	lockNet(t)
	return fmt.Sprintf("TK_UDP_SIZES=%s %s", spec, self(t))
}

// netLocked: this test process holds the network workloads' lock.
var netLocked bool

// lockNet makes a test that runs a network workload the only one on the
// machine until it ends. The tracepoints it counts (kfree_skb,
// netif_receive_skb) see every network namespace, and go test runs
// packages side by side: dropmon's 41 drops and filter's 17 made one row
// of 58. A lock on a file, across the test processes; a test (or subtest)
// that holds it already goes on.
func lockNet(t testing.TB) {
	if netLocked {
		return
	}
	fd, err := unix.Open(filepath.Join(os.TempDir(), "tracekit-tests-net.lock"), unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o600)
	if err != nil {
		t.Fatalf("network workload lock: %v", err)
	}
	if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
		unix.Close(fd)
		t.Fatalf("network workload lock: %v", err)
	}
	netLocked = true
	t.Cleanup(func() {
		netLocked = false
		unix.Close(fd) // releases the lock
	})
}

// freshNetns moves this thread into a new network namespace with lo up and
// returns a UDP socket in it. A namespace belongs to the thread that
// unshares: the caller stays on it (LockOSThread).
func freshNetns() (int, error) {
	runtime.LockOSThread()
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		return -1, fmt.Errorf("unshare: %w", err)
	}
	ctl, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
	if err != nil {
		return -1, err
	}
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return -1, err
	}
	ifr.SetUint16(unix.IFF_UP | unix.IFF_LOOPBACK | unix.IFF_RUNNING)
	if err := unix.IoctlIfreq(ctl, unix.SIOCSIFFLAGS, ifr); err != nil {
		return -1, fmt.Errorf("lo up: %w", err)
	}
	return ctl, nil
}

func ping(spec string) int {
	var n, size int
	if _, err := fmt.Sscanf(spec, "%d:%d", &n, &size); err != nil {
		return 3
	}
	if _, err := freshNetns(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 4
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP)
	if err != nil {
		return 5
	}
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 2})
	to := &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}
	for i := 0; i < n; i++ {
		msg := make([]byte, 8+size)
		msg[0] = 8 // echo request
		msg[5] = 1 // id
		msg[7] = byte(i + 1)
		var sum uint32
		for j := 0; j+1 < len(msg); j += 2 {
			sum += uint32(msg[j])<<8 | uint32(msg[j+1])
		}
		for sum>>16 != 0 {
			sum = sum&0xffff + sum>>16
		}
		msg[2], msg[3] = byte(^sum>>8), byte(^sum)
		if err := unix.Sendto(fd, msg, 0, to); err != nil {
			return 6
		}
	}
	// A raw ICMP socket sees requests and replies: wait for n replies.
	buf := make([]byte, 65536)
	for got := 0; got < n; {
		m, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			fmt.Fprintln(os.Stderr, "no reply:", err)
			return 7
		}
		if m > 20 && buf[20] == 0 { // IP header, then ICMP type 0: reply
			got++
		}
	}
	return 0
}

func udpSizes(spec string) int {
	fd, err := freshNetns()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 4
	}
	rx, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
	if err != nil {
		return 5
	}
	to := &unix.SockaddrInet4{Port: 5555, Addr: [4]byte{127, 0, 0, 1}}
	if err := unix.Bind(rx, to); err != nil {
		return 5
	}
	unix.SetsockoptInt(rx, unix.SOL_SOCKET, unix.SO_RCVBUF, 1<<20)
	buf := make([]byte, 65536)
	for _, part := range strings.Split(spec, ",") {
		var size, n int
		if _, err := fmt.Sscanf(part, "%dx%d", &size, &n); err != nil {
			return 3
		}
		for i := 0; i < n; i++ {
			if err := unix.Sendto(fd, make([]byte, size), 0, to); err != nil {
				return 6
			}
			// Receive each one: the socket never overflows, nothing drops.
			if _, _, err := unix.Recvfrom(rx, buf, 0); err != nil {
				return 7
			}
		}
	}
	return 0
}

func udpDrops(arg string, v6 bool) int {
	n, err := strconv.Atoi(arg)
	if err != nil {
		return 3
	}
	fd, err := freshNetns()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 4
	}
	var to unix.Sockaddr = &unix.SockaddrInet4{Port: 9, Addr: [4]byte{127, 0, 0, 1}}
	if v6 {
		if fd, err = unix.Socket(unix.AF_INET6, unix.SOCK_DGRAM, 0); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 5
		}
		to = &unix.SockaddrInet6{Port: 9, Addr: [16]byte{15: 1}}
	}
	for i := 0; i < n; i++ {
		if err := unix.Sendto(fd, []byte("drop me"), 0, to); err != nil {
			fmt.Fprintln(os.Stderr, "sendto:", err)
			return 7
		}
	}
	return 0
}

var (
	buildMu  sync.Mutex
	builtDir string
)

// Tool returns the path of a tool's binary: $TRACEKIT_BIN/NAME when set
// (prebuilt, as in the kernel matrix), else a link NAME to the multi-call
// binary, built once from ../cmd/tracekit.
func Tool(t testing.TB, name string) string {
	t.Helper()
	if d := os.Getenv("TRACEKIT_BIN"); d != "" {
		return filepath.Join(d, name)
	}
	buildMu.Lock()
	defer buildMu.Unlock()
	if builtDir == "" {
		dir, err := os.MkdirTemp("", "tracekit-test")
		if err != nil {
			t.Fatal(err)
		}
		// World-readable, so that unprivileged runs can execute it too.
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		// Built by make build's own script: the binary the tests run is
		// the binary that ships.
		mod, err := exec.Command("go", "env", "GOMOD").Output()
		if err != nil {
			t.Fatalf("go env GOMOD: %v", err)
		}
		script := filepath.Join(filepath.Dir(strings.TrimSpace(string(mod))), "scripts", "build.sh")
		out, err := exec.Command("bash", script, filepath.Join(dir, "tracekit")).CombinedOutput()
		if err != nil {
			t.Fatalf("build tracekit: %v\n%s", err, out)
		}
		builtDir = dir
	}
	p := filepath.Join(builtDir, name)
	if _, err := os.Lstat(p); err != nil {
		if err := os.Symlink("tracekit", p); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// Result is what a tool run printed and its exit status.
type Result struct {
	Stdout, Stderr string
	Status         int
}

// Capability numbers (linux/capability.h) for RunAs.
const (
	CapDacReadSearch = 2
	CapSysPtrace     = 19
	CapPerfmon       = 38
	CapBPF           = 39
)

// RunAs runs a binary to completion as nobody holding only caps.
func RunAs(t testing.TB, caps []uintptr, bin string, args ...string) Result {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}, AmbientCaps: caps}
	return run(t, cmd)
}

// Run runs a binary to completion.
func Run(t testing.TB, bin string, args ...string) Result {
	t.Helper()
	return run(t, exec.Command(bin, args...))
}

func run(t testing.TB, cmd *exec.Cmd) Result {
	t.Helper()
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

// Format parses a copy of a format file from tracefs/testdata.
// Tree is the process tree of root as a 6.18 kernel's formats place its
// pids: the goldens' tree, read without tracefs.
func Tree(t testing.TB, root int, ns *asm.PidNS) *proctree.Tree {
	t.Helper()
	tr := &proctree.Tree{Root: root, NS: ns}
	if err := tr.Read(Format(t, "sched_process_fork.6.18.format"), Format(t, "sched_process_exit.6.18.format")); err != nil {
		t.Fatal(err)
	}
	return tr
}

// RawTree is Tree for raw tracepoints (proctree.Tree.TaskPid): pids read
// from task_struct at 1264, 6.18's pid (a golden's number; the verifier
// takes any offset for a probe read).
func RawTree(t testing.TB, root int, ns *asm.PidNS) *proctree.Tree {
	t.Helper()
	return &proctree.Tree{Root: root, NS: ns, TaskPid: 1264, ReadKernel: bpf.FnProbeReadKernel}
}

// Root is the tree's top: the nearest directory above the test's that
// holds tracefs/testdata (the module in a checkout, /tk/src in the
// matrix's guests, where each package's testdata is copied).
func Root(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "tracefs", "testdata")); err == nil {
			return d
		}
		if d == filepath.Dir(d) {
			t.Fatalf("no tracefs/testdata above %s", dir)
		}
	}
}

func Format(t testing.TB, name string) *tracefs.Format {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(Root(t), "tracefs", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	f, err := tracefs.ParseFormat(string(b))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return f
}

// USDTFixtures are filter's C fixtures (USDT probes, tk_add, chains):
// dir is filter/testdata/usdt relative to the calling package; built with
// gcc and sys/sdt.h, prebuilt in the kernel matrix's guests.
func USDTFixtures(t testing.TB, dir string) string {
	t.Helper()
	return Fixtures(t, dir+"/build", dir+"/build.sh", "gcc systemtap-sdt-dev", func() bool {
		_, err := exec.LookPath("gcc")
		_, errH := os.Stat("/usr/include/x86_64-linux-gnu/sys/sdt.h")
		_, errH2 := os.Stat("/usr/include/sys/sdt.h")
		return err == nil && (errH == nil || errH2 == nil)
	})
}

var (
	fixtureMu    sync.Mutex
	fixtureBuilt = map[string]string{}
)

// Fixtures is the directory of the C fixtures a build script makes: the
// prebuilt dir (relative to the package; the kernel matrix ships it, its
// guests have no compiler) when it exists, else built once per test binary
// by bash script into a temporary directory, after Install(pkgs, have).
func Fixtures(t testing.TB, prebuilt, script, pkgs string, have func() bool) string {
	t.Helper()
	if st, err := os.Stat(prebuilt); err == nil && st.IsDir() {
		abs, _ := filepath.Abs(prebuilt)
		return abs
	}
	Install(t, pkgs, have)
	fixtureMu.Lock()
	defer fixtureMu.Unlock()
	if dir, ok := fixtureBuilt[script]; ok {
		return dir
	}
	// Built once per version of the sources, in a directory named by
	// their hash that later runs reuse: a directory per test binary was
	// never removed (75 of them in /tmp after a day of runs).
	key, err := fixtureKey(script)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("tk-fixtures-%d-%s", os.Getuid(), key))
	if ownFixtures(dir) {
		fixtureBuilt[script] = dir
		return dir
	}
	tmp, err := os.MkdirTemp("", "tk-fixtures")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(tmp, 0o755) // an unprivileged run executes them too
	if out, err := exec.Command("bash", script, tmp).CombinedOutput(); err != nil {
		os.RemoveAll(tmp)
		t.Fatalf("build the fixtures (%s): %v\n%s", script, err, out)
	}
	if err := os.WriteFile(filepath.Join(tmp, ".built"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if os.Rename(tmp, dir) != nil || !ownFixtures(dir) {
		dir = tmp // another run's, or someone else's: this run's own
	}
	fixtureBuilt[script] = dir
	return dir
}

// fixtureKey hashes what a fixture script builds from: the files of its
// directory (but a prebuilt build/), and the compilers it is told of.
func fixtureKey(script string) (string, error) {
	h := sha256.New()
	root := filepath.Dir(script)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "build" && p != root {
			return filepath.SkipDir
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		fmt.Fprintf(h, "%s %d\n", p, len(b))
		h.Write(b)
		return err
	})
	for _, v := range []string{"CC", "MUSL_CC", "CHAIN_FP"} {
		fmt.Fprintf(h, "%s=%s\n", v, os.Getenv(v))
	}
	return hex.EncodeToString(h.Sum(nil))[:16], err
}

// ownFixtures: dir is a finished build of this user's that no one else
// may write to (it is in /tmp, and root runs what it holds).
func ownFixtures(dir string) bool {
	var st unix.Stat_t
	if unix.Lstat(dir, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != os.Getuid() || st.Mode&0o022 != 0 {
		return false
	}
	_, err := os.Stat(filepath.Join(dir, ".built"))
	return err == nil
}

// ForEachHook runs test once on each way to the tracepoint event (its own
// name: kfree_skb) this kernel has, perf, raw and btf, chosen through
// TRACEKIT_ATTACH: a tool's counts must not depend on it. An event of ""
// is writesize, which has no BTF tracepoint but an fentry: perf, raw, and
// fentry at the write syscall's wrapper where the kernel has trampolines.
func ForEachHook(t *testing.T, event string, test func(t *testing.T)) {
	hooks := []hook.Hook{hook.Perf}
	if hook.HaveRawTracepoints() {
		hooks = append(hooks, hook.Raw)
	}
	if event != "" && hook.HaveBTFTracepoint(event) {
		hooks = append(hooks, hook.BTF)
	}
	if event == "" && hook.HaveFentrySyscall("write") {
		hooks = append(hooks, hook.Fentry)
	}
	runHooks(t, hooks, test)
}

// ForEachFunctionHook runs test once on each way filter has to the
// kernel functions fns: the kprobe (perf), and a BPF trampoline (fentry,
// fexit) where one attaches to every one of them.
func ForEachFunctionHook(t *testing.T, test func(t *testing.T), fns ...string) {
	hooks := []hook.Hook{hook.Perf}
	fentry := true
	for _, fn := range fns {
		fentry = fentry && hook.HaveFentry(fn)
	}
	if fentry {
		hooks = append(hooks, hook.Fentry)
	}
	runHooks(t, hooks, test)
}

// runHooks runs test as a subtest per hook, with TRACEKIT_ATTACH set to it.
func runHooks(t *testing.T, hooks []hook.Hook, test func(t *testing.T)) {
	for _, h := range hooks {
		t.Run(string(h), func(t *testing.T) {
			t.Setenv(hook.Env, string(h))
			test(t)
		})
	}
}

// ForEachSyscallHook runs test once on each way filter has to the event
// syscalls:sys_enter_NAME: the tracepoint's record (perf), and the
// syscall's wrapper through a BPF trampoline (fentry) where the kernel has
// one. The counts must not depend on it.
func ForEachSyscallHook(t *testing.T, name string, test func(t *testing.T)) {
	hooks := []hook.Hook{hook.Perf}
	if hook.HaveFentrySyscall(name) {
		hooks = append(hooks, hook.Fentry)
	}
	runHooks(t, hooks, test)
}

// InPidNS runs bin in a new pid namespace with its own /proc, as
// `unshare -fp --mount-proc` does (util-linux's, or busybox's in the
// matrix guests): bin and its children see that namespace's pids.
func InPidNS(t testing.TB, bin string, args ...string) Result {
	t.Helper()
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Fatalf("the pid namespace tests need unshare(1) (util-linux or busybox): %v", err)
	}
	return Run(t, unshare, append([]string{"-fp", "--mount-proc", bin}, args...)...)
}

// Self is this test binary's path, for shell scripts that run its workloads
// (TK_WRITES=SIZE:N and the like).
func Self(t testing.TB) string { return self(t) }

// PidNSScript is a shell script to run inside a new pid namespace (see
// InPidNS): a writer waits on a fifo while tool starts with args (shell
// words: "$target" is the writer's pid there); once the tool says
// "Tracing", another process makes 50 writes of 123 bytes, then the writer
// makes 17, and the tool is stopped with SIGTERM. The script prints the
// tool's stdout, and "target PID" on stderr.
func PidNSScript(t testing.TB, tool string, args ...string) string {
	return fmt.Sprintf(`set -e
d=$(mktemp -d)
mkfifo "$d/gate"
TK_WRITES=123:17 TK_WAIT_FD=3 %[1]s 3<"$d/gate" &
target=$!
%[2]s %[3]s >"$d/out" 2>"$d/err" &
tool=$!
i=0
until grep -q Tracing "$d/err"; do
	sleep 0.1
	i=$((i+1))
	if [ $i -gt 100 ] || ! kill -0 $tool 2>/dev/null; then cat "$d/err" >&2; exit 9; fi
done
TK_WRITES=123:50 %[1]s
echo x >"$d/gate"
wait $target
kill $tool
wait $tool
echo "target $target" >&2
cat "$d/out"
rm -r "$d"
`, self(t), tool, strings.Join(args, " "))
}

// Maps creates maps from specs for a test (closed when it ends) and
// returns them as a collection without programs, for code that reads a
// tool's maps from fixed contents.
func Maps(t testing.TB, specs map[string]*ebpf.MapSpec) *ebpf.Collection {
	t.Helper()
	coll := &ebpf.Collection{Maps: map[string]*ebpf.Map{}}
	for name, spec := range specs {
		m, err := ebpf.NewMap(spec)
		if err != nil {
			t.Fatalf("map %s: %v", name, err)
		}
		t.Cleanup(func() { m.Close() })
		coll.Maps[name] = m
	}
	return coll
}

// PutPerCPU sets key of a per-CPU map to vals on the first CPUs (zeros on
// the others); with fewer CPUs than values, the last CPU holds the rest, so
// the sum is the same on every machine.
func PutPerCPU(t testing.TB, m *ebpf.Map, key any, vals ...uint64) {
	t.Helper()
	all := make([]uint64, PossibleCPUs(t))
	for i, v := range vals {
		all[min(i, len(all)-1)] += v
	}
	if err := m.Put(key, all); err != nil {
		t.Fatal(err)
	}
}

// PossibleCPUs is the number of values a per-CPU map holds per key.
func PossibleCPUs(t testing.TB) int {
	n, err := ebpf.PossibleCPU()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Exposition writes families in the Prometheus text format, then in
// OpenMetrics, for the exposition goldens.
func Exposition(t testing.TB, families []metrics.Family) string {
	t.Helper()
	var b strings.Builder
	for _, format := range []expfmt.Format{metrics.TextFormat, metrics.OpenMetricsFormat} {
		out, err := metrics.Exposition(families, format)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString(out)
	}
	return b.String()
}

// skipsRE is the line a run ends with when the kernel skipped its
// programs (run.Session.ReportSkips).
var skipsRE = regexp.MustCompile(`(?m)^([a-z]+): the kernel skipped its programs (\d+) times`)

// SkippedRuns is how many runs of tool's programs the kernel skipped, as
// the end of the run says on stderr (0 where it says nothing).
func SkippedRuns(tool, stderr string) uint64 { return toolCount(skipsRE, tool, stderr) }

// toolCount is the number re's second group finds on tool's line
// (re's first group), 0 where there is none.
func toolCount(re *regexp.Regexp, tool, stderr string) uint64 {
	for _, m := range re.FindAllStringSubmatch(stderr, -1) {
		if m[1] == tool {
			n, _ := strconv.ParseUint(m[2], 10, 64)
			return n
		}
	}
	return 0
}

// forksRE is the line a run with -c ends with when the kernel skipped the
// program that follows the command's forks (run.Session.FollowProcessTree).
var forksRE = regexp.MustCompile(`(?m)^([a-z]+): the kernel skipped following the command's processes \d+ times .*: (\d+) forks(?: or execs)? not seen`)

// ForksNotSeen is how many of the command's forks the kernel skipped
// following, as the end of the run says on stderr (0 where it says
// nothing): each a process whose events are missing.
func ForksNotSeen(tool, stderr string) uint64 { return toolCount(forksRE, tool, stderr) }

// RawNeedsBTF skips ForEachHook's raw subtest of a run that reads through
// a tracepoint's struct pointer (iolat -d, dropmon --protocol: offsets and
// argument places from BTF) on a kernel the matrix says has no BTF
// (privtest.NoBTF); the tools refuse such a run there in one line, and
// auto takes the perf tracepoint.
func RawNeedsBTF(t *testing.T) {
	t.Helper()
	if os.Getenv(hook.Env) == string(hook.Raw) && privtest.NoBTF(t) {
		t.Skip("a raw tracepoint's struct reads need BTF, which this kernel lacks")
	}
}
