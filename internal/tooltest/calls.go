package tooltest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
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
//	setuid     setuid(0), the one thread's (root): 0
//	setresuid  setresuid(-1, -1, -1): 0
//	setfsuid   setfsuid(0): 0, the fsuid before
//	nanosleep  nanosleep of 1 ms: 0
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
		var s unix.Statfs_t
		return unix.Statfs("/", &s)
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
		return errno(unix.RawSyscall(unix.SYS_SETUID, 0, 0, 0))
	case "setresuid":
		none := ^uintptr(0)
		return errno(unix.RawSyscall(unix.SYS_SETRESUID, none, none, none))
	case "setfsuid":
		unix.RawSyscall(unix.SYS_SETFSUID, 0, 0, 0) // its result is the fsuid before, never an error
		return nil
	case "nanosleep":
		ts := unix.NsecToTimespec(int64(time.Millisecond))
		return unix.Nanosleep(&ts, nil)
	case "write":
		return writeNull()
	case "retrans":
		return retransRound()
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
