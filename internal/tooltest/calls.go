package tooltest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Calls is the shell command for a process named comm that makes the
// system calls spec names, each its number of times, in order, each
// with a known outcome ("kill:3,fsync:2"):
//
//	kill       kill(its own pid, 0): 0
//	statfs     statfs("/"): 0
//	statx      statx(AT_FDCWD, "/", 0, STATX_BASIC_STATS): 0
//	fsync      fsync of a file of its own: 0
//	fdatasync  fdatasync of that file: 0
//	syncfs     syncfs of that file's file system: 0
//	setuid     setuid(0), the one thread's (root): 0 (setuid32 on
//	           32-bit Arm, as setresuid and setfsuid: the tracepoints' calls)
//	setresuid  setresuid(-1, -1, -1): 0
//	setfsuid   setfsuid(0): 0, the fsuid before
//	nanosleep  nanosleep of 1 ms: 0 (interrupted, the rest slept by
//	           another call)
//	tcp        a connection to a listener of its own on 127.0.0.1,
//	           accepted (by a thread of its own, of the same name), 5
//	           bytes each way, both ends closed
//	unix       a write of "tkunix\n" to a Unix stream socket, read at
//	           the other end
//	write      a write of one byte to /dev/null
//	retrans    a connection refused its first SYN: its listener on
//	           127.0.0.1 (backlog 0) holds one connection not accepted,
//	           so the kernel drops the SYN and the client sends it again
//	           (about a second later), then gives up on it
//	purge      a connection to a listener of its own on 127.0.0.1 that
//	           sends a byte and is never accepted: the listener closed
//	           with it in its queue, the kernel purges the byte's queue
//	           (6.8+: drop reason QUEUE_PURGE, the skb's socket the
//	           connection's)
//	swapin     64 pages of its own written, paged out to swap
//	           (MADV_PAGEOUT, 5.4+: swap must be on) until none is in
//	           memory, swap cache included, and read back
//	oom        a child of the same name that moves itself into the
//	           cgroup v2 directory $TK_CGROUP (its memory.max set low)
//	           and takes memory until the kernel's OOM killer ends it
//	thread     a thread started (clone) that ends at once
//	sleep      a sleep of 100 ms (whatever calls the runtime makes)
//	exec       an exec of itself ("SELF tkexec", comm kept), last: the
//	           calls after it are made by the new image, the count
//	           going down by one each time
//
// The calls are raw (no libc, no Go runtime wrapper that adds or spreads
// calls): setuid is the calling thread's, not every thread's.
func Calls(t testing.TB, comm, spec string) string {
	if strings.Trim(comm, "abcdefghijklmnopqrstuvwxyz0123456789") != "" || len(comm) > 15 {
		t.Fatalf("workload comm %q: lower-case letters and digits, 15 at most", comm)
	}
	env, err := exec.LookPath("env")
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%s TK_COMM=%s TK_CALLS=%s %s", env, comm, spec, self(t))
}

// callsComm is the workload's name, which each thread that makes its
// calls takes (nameThread).
var callsComm string

// nameThread locks the calling goroutine to its thread, for good, and
// names that thread callsComm.
func nameThread() error {
	runtime.LockOSThread()
	name, err := unix.BytePtrFromString(callsComm)
	if err != nil {
		return err
	}
	return unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(name)), 0, 0, 0)
}

func calls(spec, comm string) int {
	callsComm = comm
	if nameThread() != nil { // one thread named, and the calls made from it
		return 3
	}
	var file *os.File
	parts := strings.Split(spec, ",")
	for i, part := range parts {
		call, count, ok := strings.Cut(part, ":")
		n, err := strconv.Atoi(count)
		if !ok || err != nil || n < 0 {
			return 3
		}
		if file == nil && (call == "fsync" || call == "fdatasync" || call == "syncfs") {
			if file, err = os.CreateTemp("", "tkcalls"); err != nil {
				return 4
			}
			defer os.Remove(file.Name())
			if _, err := file.WriteString("tkcalls\n"); err != nil {
				return 4
			}
		}
		if call == "exec" {
			if n == 0 {
				continue
			}
			rest := append([]string{fmt.Sprintf("exec:%d", n-1)}, parts[i+1:]...)
			env := []string{"TK_CALLS=" + strings.Join(rest, ",")}
			for _, e := range os.Environ() {
				if !strings.HasPrefix(e, "TK_CALLS=") {
					env = append(env, e)
				}
			}
			self, err := os.Executable()
			if err != nil {
				return 4
			}
			if file != nil {
				os.Remove(file.Name())
			}
			err = unix.Exec(self, []string{self, "tkexec"}, env)
			fmt.Fprintln(os.Stderr, "exec:", err)
			return 4
		}
		for j := 0; j < n; j++ {
			if err := call1(call, file); err != nil {
				fmt.Fprintf(os.Stderr, "%s: %v\n", call, err)
				return 4
			}
		}
	}
	return 0
}

// root is "/", for the raw statfs.
var root = []byte("/\x00")

// call1 makes one call of calls's.
func call1(call string, file *os.File) error {
	errno := func(_, _ uintptr, e unix.Errno) error {
		if e != 0 {
			return e
		}
		return nil
	}
	switch call {
	case "kill":
		return errno(unix.RawSyscall(unix.SYS_KILL, uintptr(os.Getpid()), 0, 0))
	case "statfs":
		// statfs itself: 32-bit Arm's unix.Statfs is statfs64, whose
		// tracepoint statsnoop does not probe. Statfs_t is as large as
		// either's struct.
		var s unix.Statfs_t
		return errno(unix.RawSyscall(unix.SYS_STATFS, uintptr(unsafe.Pointer(&root[0])), uintptr(unsafe.Pointer(&s)), 0))
	case "statx":
		var s unix.Statx_t
		return unix.Statx(unix.AT_FDCWD, "/", 0, unix.STATX_BASIC_STATS, &s)
	case "fsync":
		return unix.Fsync(int(file.Fd()))
	case "fdatasync":
		return unix.Fdatasync(int(file.Fd()))
	case "syncfs":
		return unix.Syncfs(int(file.Fd()))
	case "setuid":
		return errno(unix.RawSyscall(sysSetuid, 0, 0, 0))
	case "setresuid":
		none := ^uintptr(0)
		return errno(unix.RawSyscall(sysSetresuid, none, none, none))
	case "setfsuid":
		unix.RawSyscall(sysSetfsuid, 0, 0, 0) // its result is the fsuid before, never an error
		return nil
	case "nanosleep":
		// A signal to the thread (the Go runtime's own) ends a sleep
		// early with EINTR: it sleeps the rest, a call of its own.
		ts := unix.NsecToTimespec(int64(time.Millisecond))
		for {
			var left unix.Timespec
			err := unix.Nanosleep(&ts, &left)
			if err != unix.EINTR {
				return err
			}
			ts = left
		}
	case "write":
		return writeNull()
	case "retrans":
		return retransRound()
	case "purge":
		return purgeRound()
	case "swapin":
		return swapRound()
	case "oom":
		return oomRound()
	case "hog":
		return hog()
	case "thread":
		done := make(chan struct{})
		go func() {
			defer close(done)
			runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		}()
		<-done
		return nil
	case "sleep":
		time.Sleep(100 * time.Millisecond)
		return nil
	case "tcp":
		return tcpRound()
	case "unix":
		return unixRound()
	}
	return fmt.Errorf("no such call in the workload")
}

// tcpRound is one TCP connection on 127.0.0.1: connected, accepted, 5
// bytes each way, closed by both ends.
func tcpRound() error {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer l.Close()
	done := make(chan error, 1)
	go func() {
		if err := nameThread(); err != nil {
			done <- err
			return
		}
		c, err := l.Accept()
		if err == nil {
			buf := make([]byte, 5)
			if _, err = c.Read(buf); err == nil {
				_, err = c.Write(buf)
			}
			c.Close()
		}
		done <- err
	}()
	c, err := net.Dial("tcp4", l.Addr().String())
	if err != nil {
		return err
	}
	if _, err := c.Write([]byte("tkcon")); err != nil {
		return err
	}
	if _, err := c.Read(make([]byte, 5)); err != nil {
		return err
	}
	c.Close()
	return <-done
}

// unixRound writes "tkunix\n" to one end of a Unix stream socket pair and
// reads it at the other.
func unixRound() error {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	if _, err := unix.Write(fds[0], []byte("tkunix\n")); err != nil {
		return err
	}
	_, err = unix.Read(fds[1], make([]byte, 16))
	return err
}

// writeNull writes one byte to /dev/null.
func writeNull() error {
	fd, err := unix.Open("/dev/null", unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	_, err = unix.Write(fd, []byte{0})
	return err
}

// retransRound makes the kernel send a SYN again: a listener of backlog 0
// whose accept queue holds a connection already drops the next SYN.
func retransRound() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		return err
	}
	if err := unix.Listen(fd, 0); err != nil {
		return err
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*unix.SockaddrInet4).Port)
	first, err := net.Dial("tcp4", addr) // queued, never accepted
	if err != nil {
		return err
	}
	defer first.Close()
	// The second SYN is dropped, sent again a second later, dropped again.
	if c, err := net.DialTimeout("tcp4", addr, 1500*time.Millisecond); err == nil {
		c.Close()
	}
	return nil
}

// purgeRound closes a listener whose accept queue holds a connection with
// a byte received.
func purgeRound() error {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return err
	}
	c, err := net.Dial("tcp4", l.Addr().String())
	if err != nil {
		l.Close()
		return err
	}
	defer c.Close()
	if _, err := c.Write([]byte("p")); err != nil {
		l.Close()
		return err
	}
	// Loopback delivers in the sender's call; the wait is a margin.
	time.Sleep(10 * time.Millisecond)
	return l.Close()
}

// touchedSink keeps swapRound's reads of pages from being optimized away.
var touchedSink byte

// swapRound writes 64 pages, has the kernel page them out to swap and
// reads them back: each read in once (by the fault, or by its readahead
// in the same task).
func swapRound() error {
	size := 64 * os.Getpagesize()
	m, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return err
	}
	defer unix.Munmap(m)
	for i := range m {
		m[i] = byte(i%251 + 1) // no page of zeros, which could be left unswapped
	}
	// MADV_PAGEOUT writes the pages to swap, but a page whose write is
	// still under way when it is asked stays in the swap cache, where
	// reading it back finds it with no read from swap (the 5.10 and 6.1
	// guests: 64 pages out, none in). Such a page, read where it is (no
	// IO) once its write is done, is clean: paged out again, it is
	// freed at once. Until mincore says none is left in memory.
	page := os.Getpagesize()
	resident := make([]byte, size/page)
	var touched byte
	for try := 0; ; try++ {
		if err := unix.Madvise(m, unix.MADV_PAGEOUT); err != nil {
			return err
		}
		if _, _, e := unix.RawSyscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(size), uintptr(unsafe.Pointer(&resident[0]))); e != 0 {
			return fmt.Errorf("mincore: %w", e)
		}
		left := 0
		for i, r := range resident {
			if r&1 != 0 {
				left++
				touched += m[i*page] // mapped again from the swap cache: no read from swap
			}
		}
		if left == 0 {
			break
		}
		if try == 100 {
			return fmt.Errorf("%d of %d pages still in memory after 100 tries of MADV_PAGEOUT", left, len(resident))
		}
		time.Sleep(20 * time.Millisecond)
	}
	touchedSink = touched // kept: the reads above must be made
	var sum byte
	for i := 0; i < size; i += page {
		sum += m[i]
	}
	if sum == 0 {
		return fmt.Errorf("pages read back as zeros")
	}
	return nil
}

// oomRound runs a child that hogs memory in $TK_CGROUP until the OOM
// killer ends it.
func oomRound() error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(self)
	cmd.Env = []string{"TK_CALLS=hog:1"}
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "TK_CALLS=") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	cmd.Stderr = os.Stderr
	err = cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			return nil // the OOM killer's
		}
	}
	return fmt.Errorf("the memory hog was not killed: %v", err)
}

// hog moves itself into $TK_CGROUP and takes memory, a page at a time,
// up to 1 GiB.
func hog() error {
	cg := os.Getenv("TK_CGROUP")
	if err := os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte("0"), 0); err != nil {
		return err
	}
	var held [][]byte
	for i := 0; i < 1<<18; i++ {
		b := make([]byte, 4096)
		b[0] = 1
		held = append(held, b)
	}
	return fmt.Errorf("took %d pages, and was not killed", len(held))
}
