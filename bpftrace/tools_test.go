package bpftrace_test

import (
	"debug/elf"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cilium/ebpf/btf"
	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/internal/tooltest"
	"github.com/tracekit/tracekit/tracefs"
)

// toolsDir holds Debian's bpftrace tools: make test installs the package
// on the host, and the kernel matrix copies them into its guests.
const toolsDir = "/usr/sbin"

// toolCase is one of Debian's tools run unmodified on a workload that
// makes its events a known number of times.
type toolCase struct {
	tool    string
	kprobes bool   // it attaches kprobes: the kernel matrix's guests
	btf     bool   // it casts to the kernel's types: not where BTF is not
	need    string // a file the workload needs ("": none), else skipped
	// lacks says what the machine lacks that the tool needs (a kernel's
	// function, member or symbol, a library's; "": none) and the refusal
	// ours then prints, exit 2, as bpftrace refuses it too (bpftrace 0.17
	// runs threadsnoop.bt with no probe but BEGIN's): the refusal is
	// checked, and the case skipped.
	lacks func(t *testing.T) (what, refusal string)
	// lacksRuns: where the machine lacks what lacks says, the tool runs
	// on without those probes (bpftrace too), exit 0, its stderr saying
	// so (refusal), with nothing of the workload to count: skipped then.
	lacksRuns bool
	// noPeer says why bpftrace does not run it here, if it does not.
	noPeer string
	cmd    func(t *testing.T) string
	// check says what the output lacks of the workload's events: each
	// counted exactly where the kernel gives exact numbers. Ours and, on
	// the host, bpftrace's are held to it.
	check func(out string) error
	// peerCheck, where bpftrace's output differs by design of ours, holds
	// bpftrace's to what it prints (nil: check).
	peerCheck func(out string) error
}

// count is the number of out's lines that match re, which is anchored
// at both ends.
func count(out, re string) int {
	return len(regexp.MustCompile(`(?m)^`+re+`$`).FindAllString(out, -1))
}

// exactly says how the count of lines matching re differs from n.
func exactly(out, re string, n int) error {
	if got := count(out, re); got != n {
		return fmt.Errorf("%d lines match %s, want %d", got, re, n)
	}
	return nil
}

// atLeast says how the count of lines matching re falls short of n.
func atLeast(out, re string, n int) error {
	if got := count(out, re); got < n {
		return fmt.Errorf("%d lines match %s, want %d at least", got, re, n)
	}
	return nil
}

// all is the first error of errs.
func all(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// histTotal is the sum of the counts of the histogram printed after
// header ("@usecs: "), -1 if none is.
func histTotal(out, header string) int64 {
	i := strings.Index(out, "\n"+header+"\n")
	if i < 0 {
		return -1
	}
	var total int64
	body, _, _ := strings.Cut(out[i+len(header)+2:], "\n\n")
	for _, m := range regexp.MustCompile(`(?m)^[\[(].*?\s+(\d+) \|`).FindAllStringSubmatch(body, -1) {
		n, _ := strconv.ParseInt(m[1], 10, 64)
		total += n
	}
	return total
}

// bucketsTotal is the sum of the counts of every histogram in out.
func bucketsTotal(out string) int64 {
	var total int64
	for _, m := range regexp.MustCompile(`(?m)^[\[(].*?\s+(\d+) \|.*\|$`).FindAllStringSubmatch(out, -1) {
		n, _ := strconv.ParseInt(m[1], 10, 64)
		total += n
	}
	return total
}

// atLeastCounted says how a histogram's total falls short of n.
func atLeastCounted(out, header string, n int64) error {
	if got := histTotal(out, header); got < n {
		return fmt.Errorf("the histogram %q counts %d, want %d at least", header, got, n)
	}
	return nil
}

const clock = `\d\d:\d\d:\d\d` // time()'s %H:%M:%S

func toolCases(t *testing.T) []toolCase {
	self := regexp.QuoteMeta(tooltest.Self(t))
	var purges int // tcpdrop's: its workload's drops that have a reason
	return []toolCase{
		{tool: "execsnoop", cmd: func(t *testing.T) string { return tooltest.Calls(t, "tkcalls", "exec:3") },
			check: func(out string) error {
				line := `\d+\s+\d+\s+` + self + ` tkexec`
				if err := exactly(out, line, 3); err != nil {
					return err
				}
				// In the order they ran, across CPUs.
				var last int64
				for _, m := range regexp.MustCompile(`(?m)^(\d+)\s+\d+\s+`+self).FindAllStringSubmatch(out, -1) {
					ms, _ := strconv.ParseInt(m[1], 10, 64)
					if ms < last {
						return fmt.Errorf("an exec at %d ms printed after one at %d ms", ms, last)
					}
					last = ms
				}
				return nil
			}},
		{tool: "opensnoop", cmd: func(t *testing.T) string {
			path := filepath.Join(t.TempDir(), "tkopened")
			write(t, path, "")
			return tooltest.Opens(t, "tkopens", tooltest.Open{Path: path, Times: 5}, tooltest.Open{Path: "/tk-nonexistent", Times: 2, Missing: true})
		}, check: func(out string) error {
			return all(exactly(out, `\d+\s+tkopens\s+\d+   0 /\S+/tkopened`, 5),
				exactly(out, `\d+\s+tkopens\s+-1   2 /tk-nonexistent`, 2))
		}},
		{tool: "killsnoop", cmd: func(t *testing.T) string { return tooltest.Calls(t, "tkcalls", "kill:4") },
			check: func(out string) error {
				return exactly(out, clock+`  \d+\s+tkcalls\s+0    \d+\s+0`, 4)
			}},
		{tool: "statsnoop", cmd: func(t *testing.T) string { return tooltest.Calls(t, "tkcalls", "statfs:2,statx:3") },
			check: func(out string) error { return exactly(out, `\d+\s+tkcalls\s+0 /`, 5) }},
		{tool: "syncsnoop", cmd: func(t *testing.T) string { return tooltest.Calls(t, "tkcalls", "fsync:3,fdatasync:2,syncfs:1") },
			check: func(out string) error {
				line := clock + `  \d+\s+tkcalls\s+tracepoint:syscalls:sys_enter_`
				return all(exactly(out, line+"fsync", 3), exactly(out, line+"fdatasync", 2), exactly(out, line+"syncfs", 1))
			}},
		{tool: "setuids", cmd: func(t *testing.T) string { return tooltest.Calls(t, "tkcalls", "setuid:2,setresuid:1,setfsuid:1") },
			check: func(out string) error {
				line := clock + ` \d+\s+tkcalls\s+0\s+`
				return all(exactly(out, line+`setuid    uid=0 \(0\)`, 2),
					exactly(out, line+`setresuid ruid=-1 euid=-1 suid=-1 \(0\)`, 1),
					exactly(out, line+`setfsuid  uid=0 \(prevuid=0\)`, 1))
			}},
		{tool: "naptime", btf: true, cmd: func(t *testing.T) string { return tooltest.Calls(t, "tkcalls", "nanosleep:3") },
			check: func(out string) error {
				// The command's parent is the tool, by its name.
				return exactly(out, clock+` \d+\s+bpftrace\s+\d+\s+tkcalls\s+0\.001`, 3)
			}},
		{tool: "syscount", cmd: func(t *testing.T) string { return tooltest.Calls(t, "tkcalls", "kill:3000") },
			check: func(out string) error {
				// print(@, 10): ten of each at most, the workload's among them.
				for _, re := range []string{`@syscall\[\d+\]: \d+`, `@process\[.*\]: \d+`} {
					if n := count(out, re); n < 1 || n > 10 {
						return fmt.Errorf("%d lines match %s, want 1 to 10", n, re)
					}
				}
				return all(
					atLeast(out, fmt.Sprintf(`@syscall\[%d\]: \d{4,}`, unix.SYS_KILL), 1),
					atLeast(out, `@process\[tkcalls\]: [3-9]\d{3,}`, 1))
			}},
		{tool: "bitesize", cmd: func(t *testing.T) string {
			// The tool counts by the issuer's name: dd's reads of its
			// own file, were it not in the page cache, would be dd's
			// too (CI's 58 once). cat reads it first.
			run := filepath.Join(t.TempDir(), "run.sh")
			dd, err := exec.LookPath("dd")
			if err != nil {
				t.Fatal(err)
			}
			write(t, run, fmt.Sprintf("cat %s > /dev/null && dd if=/dev/zero of=%s bs=4k count=57 oflag=direct\n", dd, tooltest.LoopDevice(t)))
			return "sh " + run
		}, check: func(out string) error {
			if n := bucket(out[max(strings.Index(out, "@[dd]: \n"), 0):], "[4K, 8K)"); n != 57 {
				return fmt.Errorf("@[dd]'s [4K, 8K) counts %d IOs, want dd's 57", n)
			}
			return nil
		}},
		{tool: "runqlat", btf: true, noPeer: "bpftrace 0.17 needs the kernel's headers for it (TASK_RUNNING), which this host lacks",
			cmd: func(t *testing.T) string { return tooltest.Calls(t, "tkcalls", "nanosleep:20") },
			check: func(out string) error {
				return atLeastCounted(out, "@usecs: ", 20) // each sleep's wake-up, at least
			}},
		{tool: "cpuwalk", cmd: func(t *testing.T) string { return tooltest.SpinThread(t, 1) },
			check: func(out string) error {
				return atLeastCounted(out, "@cpu: ", 50) // a second of a thread on CPU, at 99 Hz
			}},
		{tool: "pidpersec", cmd: func(t *testing.T) string { return tooltest.Calls(t, "tkcalls", "thread:20,sleep:13") },
			check: func(out string) error {
				var total int64
				for _, m := range regexp.MustCompile(`(?m)^`+clock+` PIDs/sec: @: (\d+)$`).FindAllStringSubmatch(out, -1) {
					n, _ := strconv.ParseInt(m[1], 10, 64)
					total += n
				}
				if total < 20 {
					return fmt.Errorf("%d new tasks counted, want the workload's 20 threads at least", total)
				}
				return nil
			}},
		// The kprobe tools: the kernel matrix's guests, quiet but for the
		// test, where what is counted system-wide is the workload's.
		{tool: "capable", kprobes: true, cmd: func(t *testing.T) string { return tooltest.Calls(t, "tkcalls", "setuid:3") },
			check: func(out string) error {
				return exactly(out, clock+`  0\s+\d+\s+tkcalls\s+7\s+CAP_SETUID\s+\d+`, 3)
			}},
		{tool: "tcpconnect", kprobes: true, btf: true, cmd: func(t *testing.T) string { return tooltest.Calls(t, "tkcalls", "tcp:3") },
			check: func(out string) error {
				return exactly(out, clock+` \d+\s+tkcalls\s+127\.0\.0\.1\s+\d+\s+127\.0\.0\.1\s+\d+ *`, 3)
			}},
		{tool: "tcpaccept", kprobes: true, btf: true, cmd: func(t *testing.T) string { return tooltest.Calls(t, "tkcalls", "tcp:3") },
			check: func(out string) error {
				return exactly(out, clock+` \d+\s+tkcalls\s+127\.0\.0\.1\s+\d+ 127\.0\.0\.1\s+\d+ 0/\d+`, 3)
			}},
		{tool: "tcplife", kprobes: true, btf: true, cmd: func(t *testing.T) string { return tooltest.Calls(t, "tkcalls", "tcp:3") },
			check: func(out string) error {
				// Both ends of each connection, 5 bytes each way.
				return exactly(out, `\d+\s+tkcalls\s+127\.0\.0\.1\s+\d+ 127\.0\.0\.1\s+\d+\s+0\s+0 \d+`, 6)
			}},
		{tool: "tcpsynbl", kprobes: true, btf: true, cmd: func(t *testing.T) string { return tooltest.Calls(t, "tkcalls", "tcp:3") },
			check: func(out string) error {
				return atLeastCounted(out, regexp.MustCompile(`(?m)^@backlog\[\d+\]: $`).FindString(out), 3)
			}},
		{tool: "tcpretrans", kprobes: true, btf: true, cmd: func(t *testing.T) string { return tooltest.Calls(t, "tkcalls", "retrans:1") },
			check: func(out string) error {
				return atLeast(out, clock+` \d+\s+127\.0\.0\.1:\d+\s+127\.0\.0\.1:\d+\s+SYN_SENT *`, 1)
			}},
		{tool: "undump", kprobes: true, btf: true, cmd: func(t *testing.T) string { return tooltest.Calls(t, "tkcalls", "unix:3") },
			check: func(out string) error {
				return exactly(out, clock+` tkcalls\s+\d+\s+7\s+tkunix\\x0a`, 3)
			}},
		{tool: "vfscount", kprobes: true, cmd: func(t *testing.T) string { return tooltest.Writes(t, 4321, 50) },
			check: func(out string) error { return atLeast(out, `@\[vfs_write\]: ([5-9]\d|\d{3,})`, 1) }},
		{tool: "vfsstat", kprobes: true, cmd: func(t *testing.T) string { return tooltest.Calls(t, "tkcalls", "write:60,sleep:13") },
			check: func(out string) error {
				var total int64
				for _, m := range regexp.MustCompile(`(?m)^@\[vfs_write\]: (\d+)$`).FindAllStringSubmatch(out, -1) {
					n, _ := strconv.ParseInt(m[1], 10, 64)
					total += n
				}
				if total < 60 {
					return fmt.Errorf("%d vfs_write counted each second, want the workload's 60 at least", total)
				}
				return nil
			}},
		{tool: "loads", lacks: func(t *testing.T) (string, string) {
			if !kallsyms(t, "a-zA-Z", "avenrun") {
				return "avenrun in kallsyms (CONFIG_KALLSYMS_ALL)", `kaddr("avenrun"): no such symbol in /proc/kallsyms`
			}
			return "", ""
		}, cmd: func(t *testing.T) string { return tooltest.Calls(t, "tkcalls", "sleep:13") },
			check: func(out string) error {
				return atLeast(out, clock+` load averages: \d+\.\d{3} \d+\.\d{3} \d+\.\d{3}`, 1)
			}},
		{tool: "runqlen", btf: true, lacks: func(t *testing.T) (string, string) {
			if !member(t, "cfs_rq", "nr_running") {
				return "struct cfs_rq's nr_running (newer kernels count nr_queued)", "struct cfs_rq has no member nr_running"
			}
			return "", ""
		}, cmd: func(t *testing.T) string { return tooltest.SpinThread(t, 1) },
			check: func(out string) error { return atLeastCounted(out, "@runqlen: ", 50) }},
		{tool: "biolatency", kprobes: true, lacks: missingFunctions("blk_account_io_start", "__blk_account_io_start"),
			cmd: func(t *testing.T) string {
				return fmt.Sprintf("dd if=/dev/zero of=%s bs=4k count=57 oflag=direct", tooltest.LoopDevice(t))
			},
			check: func(out string) error { return atLeastCounted(out, "@usecs: ", 57) }},
		{tool: "bashreadline", need: "/usr/bin/script", cmd: func(t *testing.T) string {
			if _, err := os.Stat("/bin/bash"); err != nil {
				t.Skip("the workload needs /bin/bash, which this machine lacks")
			}
			// bash reads its lines with readline on a terminal only:
			// script(1) gives it one.
			dir := t.TempDir()
			write(t, filepath.Join(dir, "lines"), "echo tkline1\necho tkline2\nexit\n")
			write(t, filepath.Join(dir, "run.sh"), `script -qec "bash --norc --noprofile -i" /dev/null < "$(dirname "$0")/lines" > /dev/null`+"\n")
			return "sh " + filepath.Join(dir, "run.sh")
		}, check: func(out string) error {
			line := clock + `  \d+\s+`
			return all(exactly(out, line+"echo tkline1", 1), exactly(out, line+"echo tkline2", 1), exactly(out, line+"exit", 1))
		}},
		{tool: "writeback", cmd: func(t *testing.T) string {
			dir := t.TempDir()
			var fs unix.Statfs_t
			if err := unix.Statfs(dir, &fs); err != nil {
				t.Fatal(err)
			}
			if kind := int64(fs.Type); kind == unix.TMPFS_MAGIC || kind == unix.RAMFS_MAGIC {
				t.Skipf("%s is in memory (the guests' root): no writeback to trace", dir)
			}
			// A dirty file, and sync(1): a writeback of its device for sync.
			write(t, filepath.Join(dir, "run.sh"), `dd if=/dev/zero of="$(dirname "$0")/dirty" bs=4k count=16 2>/dev/null; sync`+"\n")
			return "sh " + filepath.Join(dir, "run.sh")
		}, check: func(out string) error {
			return atLeast(out, clock+`  \S+\s+\d+\s+sync\s+\d+\.\d{3}`, 1)
		}},
		{tool: "sslsnoop", need: "/usr/bin/openssl", cmd: tlsRound,
			// What openssl calls on a round varies (a write that fails
			// and is made again, the server's reads or none): calls are
			// seen, each named.
			check: func(out string) error { return tlsCalls(out, "SSL_write|SSL_read") },
			// bpftrace 0.17 names a uprobe's func from the address, in a
			// process gone by then: mostly it prints the address.
			peerCheck: func(out string) error { return tlsCalls(out, `SSL_write|SSL_read|0x[0-9a-f]+`) }},
		{tool: "ssllatency", need: "/usr/bin/openssl", cmd: tlsRound,
			check: func(out string) error {
				stat := `@statF?\[%s\]: count \d+, average \d+, total \d+`
				return all(atLeast(out, fmt.Sprintf(stat, `(SSL_write|SSL_read)`), 1), exactly(out, fmt.Sprintf(stat, `0x[0-9a-f]+`), 0))
			},
			peerCheck: func(out string) error {
				return atLeast(out, `@statF?\[(SSL_write|SSL_read|0x[0-9a-f]+)\]: count \d+, average \d+, total \d+`, 1)
			}},
		{tool: "swapin", kprobes: true, lacks: missingFunctions("swap_readpage"), cmd: func(t *testing.T) string {
			swapOn(t)
			return tooltest.Calls(t, "tkcalls", "swapin:1,sleep:13")
		}, check: func(out string) error {
			// Each of its pages paged out is read in once, in its task;
			// MADV_PAGEOUT may leave a page not yet on the LRU lists.
			var total int64
			for _, m := range regexp.MustCompile(`(?m)^@\[tkcalls, \d+\]: (\d+)$`).FindAllStringSubmatch(out, -1) {
				n, _ := strconv.ParseInt(m[1], 10, 64)
				total += n
			}
			if total < 32 || total > 64 {
				return fmt.Errorf("%d pages read in by the workload, want 32 to its 64", total)
			}
			return nil
		}},
		{tool: "oomkill", kprobes: true, btf: true, cmd: func(t *testing.T) string {
			return "TK_CGROUP=" + memCgroup(t, "16M") + " " + tooltest.Calls(t, "tkcalls", "oom:1")
		}, check: func(out string) error {
			return exactly(out, clock+` Triggered by PID \d+ \("tkcalls"\), OOM kill of PID \d+ \("tkcalls"\), \d+ pages, loadavg: .*`, 1)
		}},
		// What the machines here lack, refused as bpftrace refuses it;
		// where it is not lacking, no workload of known counts is here
		// yet (cmd nil).
		{tool: "mdflush", kprobes: true, lacks: missingFunctions("md_flush_request")},
		{tool: "xfsdist", kprobes: true, lacks: missingFunctions("xfs_file_read_iter")},
		{tool: "dcsnoop", kprobes: true, btf: true, lacks: missingFunctions("lookup_fast", "lookup_fast.constprop.*"),
			cmd: func(t *testing.T) string {
				// A name that is not there, looked up three times: a miss
				// of the dentry cache (d_lookup), then its negative
				// dentry, found by lookup_fast.
				dir := t.TempDir()
				write(t, filepath.Join(dir, "run.sh"), `for i in 1 2 3; do ls "$(dirname "$0")/tkdcsnoop" 2>/dev/null; done; true`+"\n")
				return "sh " + filepath.Join(dir, "run.sh")
			}, check: func(out string) error {
				return atLeast(out, `\d+\s+\d+\s+ls\s+[RM] tkdcsnoop`, 1)
			}},
		{tool: "biosnoop", kprobes: true, btf: true, lacks: func(t *testing.T) (string, string) {
			if what, refusal := missingFunctions("blk_account_io_start", "__blk_account_io_start")(t); what != "" {
				return what, refusal
			}
			if !privtest.NoBTF(t) && !member(t, "request_queue", "disk") {
				return "struct request_queue's disk (5.16+)", "struct request_queue has no member disk"
			}
			return "", ""
		}, cmd: func(t *testing.T) string {
			return fmt.Sprintf("dd if=/dev/zero of=%s bs=4k count=57 oflag=direct", tooltest.LoopDevice(t))
		}, check: func(out string) error {
			return exactly(out, `\d+\s+loop\d+\s+dd\s+\d+\s+\d+`, 57)
		}},
		{tool: "biostacks", kprobes: true, lacksRuns: true, lacks: func(t *testing.T) (string, string) {
			// Its second probe (blk_mq_start_request) attaches alone,
			// never to find a request the first saw.
			what, _ := missingFunctions("blk_account_io_start", "__blk_account_io_start")(t)
			return what, "bpftrace: the kernel has no blk_account_io_start, __blk_account_io_start"
		},
			cmd: func(t *testing.T) string {
				return fmt.Sprintf("dd if=/dev/zero of=%s bs=4k count=57 oflag=direct", tooltest.LoopDevice(t))
			}, check: func(out string) error {
				// One histogram a stack: dd's 57 requests, and others'.
				if n := bucketsTotal(out); n < 57 {
					return fmt.Errorf("the histograms count %d requests, want dd's 57 at least", n)
				}
				return nil
			}},
		{tool: "threadsnoop", lacks: func(t *testing.T) (string, string) {
			lib := ""
			for _, dir := range []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"} {
				if m, _ := filepath.Glob(filepath.Join(dir, "libpthread.so*")); len(m) > 0 {
					lib = m[0]
					break
				}
			}
			if lib == "" {
				return "libpthread", "libpthread: not found"
			}
			if !elfDefines(t, lib, "pthread_create") {
				return "pthread_create in " + lib + " (glibc 2.34+ has it in libc)", `has no function "pthread_create"`
			}
			return "", ""
		}},
		// 6.8+ gives the purge of a closed listener's queue a reason
		// (QUEUE_PURGE), which the tool's reason > NOT_SPECIFIED lets by;
		// before, the purge has none, and the tool prints none of it.
		{tool: "tcpdrop", btf: true, noPeer: "bpftrace 0.17 needs the kernel's headers for it (net/sock.h), which this host lacks",
			lacks: func(t *testing.T) (string, string) {
				if _, ok := dropReasons(t); !ok {
					return "skb:kfree_skb's reason (5.17+)", "SKB_DROP_REASON_NOT_SPECIFIED"
				}
				return "", ""
			}, cmd: func(t *testing.T) string {
				// 6.8+ gives the purge of a closed listener's queue a
				// reason (QUEUE_PURGE), which the tool's reason >
				// NOT_SPECIFIED lets by; before, the purge has none, and
				// the tool prints none of it.
				purges = 0
				if reasons, _ := dropReasons(t); slices.Contains(reasons, "QUEUE_PURGE") {
					purges = 3
				}
				return tooltest.Calls(t, "tkcalls", "purge:3")
			}, check: func(out string) error {
				return exactly(out, clock+` \d+\s+tkcalls\s+127\.0\.0\.1:\d+\s+127\.0\.0\.1:\d+\s+[A-Z_]+ *`, purges)
			}},
		{tool: "gethostlatency", need: "/usr/bin/getent",
			cmd: func(t *testing.T) string { return "/usr/bin/getent ahosts localhost localhost localhost" },
			check: func(out string) error {
				return exactly(out, clock+`  \d+\s+getent\s+\d+ localhost`, 3)
			}},
	}
}

// TestDebianTools runs Debian's bpftrace tools (/usr/sbin/*.bt)
// unmodified, each on a workload that makes its events a known number of
// times, through ours and, on the host, through bpftrace: both outputs
// hold the workload's events, exactly where the kernel gives exact
// numbers, in the tool's own layout.
func TestDebianTools(t *testing.T) {
	privtest.Require(t)
	for _, tc := range toolCases(t) {
		t.Run(tc.tool, func(t *testing.T) {
			script := filepath.Join(toolsDir, tc.tool+".bt")
			if _, err := os.Stat(script); err != nil {
				if os.Getenv("REQUIRE_PRIVILEGED") != "" {
					t.Fatalf("%v: make test installs Debian's bpftrace, whose tools these are, and the kernel matrix copies them", err)
				}
				t.Skipf("no %s (Debian's bpftrace is not installed)", script)
			}
			if tc.kprobes {
				privtest.RequireKprobes(t)
			}
			if tc.btf && privtest.NoBTF(t) {
				t.Skip("it casts to the kernel's types, from BTF, which this kernel does not publish")
			}
			if tc.need != "" {
				if _, err := os.Stat(tc.need); err != nil {
					t.Skipf("the workload needs %s, which this machine lacks", tc.need)
				}
			}
			if tc.lacks != nil {
				if what, refusal := tc.lacks(t); what != "" {
					r := tooltest.Run(t, tooltest.Tool(t, "bpftrace"), "-c", "true", script)
					status := 2
					if tc.lacksRuns {
						status = 0
					}
					if r.Status != status || !strings.Contains(r.Stderr, refusal) {
						t.Fatalf("exit %d, stderr %q; want %d and %q", r.Status, r.Stderr, status, refusal)
					}
					if tc.lacksRuns {
						t.Skipf("the machine lacks %s: runs without it, as it says, with nothing to count", what)
					}
					t.Skipf("the machine lacks %s: refused, in one line", what)
				}
			}
			if tc.cmd == nil {
				t.Skip("the machine has what it needs, but no workload of known counts is here for it")
			}
			cmd := tc.cmd(t)
			ours := tooltest.Run(t, tooltest.Tool(t, "bpftrace"), "-c", cmd, script)
			if ours.Status != 0 {
				t.Fatalf("exit %d\nstdout: %s\nstderr: %s", ours.Status, ours.Stdout, ours.Stderr)
			}
			if err := tc.check(ours.Stdout); err != nil {
				t.Errorf("%v:\n%s\nstderr (the tool's and the workload's): %s", err, ours.Stdout, ours.Stderr)
			}
			bt := peer(t)
			if bt == "" {
				return
			}
			if tc.noPeer != "" {
				t.Logf("bpftrace not run: %s", tc.noPeer)
				return
			}
			theirs := tooltest.Run(t, bt, "-c", peerCommand(cmd), script)
			if theirs.Status != 0 {
				t.Fatalf("bpftrace: exit %d\nstdout: %s\nstderr: %s", theirs.Status, theirs.Stdout, theirs.Stderr)
			}
			check := tc.check
			if tc.peerCheck != nil {
				check = tc.peerCheck
			}
			if err := check(theirs.Stdout); err != nil {
				t.Errorf("bpftrace: %v:\n%s", err, theirs.Stdout)
			}
		})
	}
}

// kallsyms says whether /proc/kallsyms has a symbol of one of names, of a
// type that types (a class: "tT" for functions) holds.
func kallsyms(t *testing.T, types string, names ...string) bool {
	b, err := os.ReadFile("/proc/kallsyms")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if regexp.MustCompile(`(?m) [` + types + `] ` + regexp.QuoteMeta(name) + `(\t.*)?$`).Match(b) {
			return true
		}
	}
	return false
}

// member says whether the kernel's struct name has a member of that name,
// by its BTF.
func member(t *testing.T, name, field string) bool {
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		t.Fatal(err)
	}
	var s *btf.Struct
	if err := spec.TypeByName(name, &s); err != nil {
		t.Fatal(err)
	}
	for _, m := range s.Members {
		if m.Name == field {
			return true
		}
	}
	return false
}

// tlsRound is a command for one TLS connection between openssl's
// s_server and s_client on 127.0.0.1, the client sending a line.
func tlsRound(t *testing.T) string {
	dir := t.TempDir()
	key, cert := filepath.Join(dir, "key"), filepath.Join(dir, "cert")
	if out, err := exec.Command("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
		"-nodes", "-keyout", key, "-out", cert, "-subj", "/CN=tk", "-days", "1").CombinedOutput(); err != nil {
		t.Fatalf("openssl req: %v: %s", err, out)
	}
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	write(t, filepath.Join(dir, "run.sh"), fmt.Sprintf(`d=$(dirname "$0")
openssl s_server -accept 127.0.0.1:%[1]d -cert "$d/cert" -key "$d/key" -naccept 1 -quiet > /dev/null &
for i in 1 2 3 4 5 6 7 8 9 10; do
	echo tkssl | openssl s_client -connect 127.0.0.1:%[1]d -quiet -no_ign_eof 2>/dev/null && break
	sleep 0.2
done
wait
`, port))
	return "sh " + filepath.Join(dir, "run.sh")
}

// tlsCalls says what sslsnoop's output lacks of a TLS round: calls by
// openssl, and every call's func as funcs (alternatives) has it.
func tlsCalls(out, funcs string) error {
	line := `\d+\s+\d+\s+openssl\s+\d+\s+-?\d+ `
	return all(atLeast(out, line+`(`+funcs+`)`, 1), exactly(out, line+`\S+`, count(out, line+`(`+funcs+`)`)))
}

// swapOn turns swap on, on a loop device of its own, until the test ends.
func swapOn(t *testing.T) {
	dev := tooltest.LoopDevice(t)
	for _, argv := range [][]string{{"mkswap", dev}, {"swapon", dev}} {
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(argv, " "), err, out)
		}
	}
	t.Cleanup(func() {
		if out, err := exec.Command("swapoff", dev).CombinedOutput(); err != nil {
			t.Errorf("swapoff %s: %v: %s", dev, err, out)
		}
	})
}

// memCgroup is a cgroup v2 directory of its own whose memory.max is max
// (and no swap), removed when the test ends; cgroup2 is mounted for it
// where it is not (the kernel matrix's guests).
func memCgroup(t *testing.T, max string) string {
	root := "/sys/fs/cgroup"
	var fs unix.Statfs_t
	if err := unix.Statfs(root, &fs); err != nil || fs.Type != unix.CGROUP2_SUPER_MAGIC {
		root = t.TempDir()
		if err := unix.Mount("none", root, "cgroup2", 0, ""); err != nil {
			t.Fatalf("mount cgroup2: %v", err)
		}
		t.Cleanup(func() { unix.Unmount(root, unix.MNT_DETACH) })
	}
	if err := os.WriteFile(filepath.Join(root, "cgroup.subtree_control"), []byte("+memory"), 0); err != nil {
		t.Fatalf("enable the memory controller: %v", err)
	}
	dir := filepath.Join(root, fmt.Sprintf("tk-oom-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(dir) })
	for file, v := range map[string]string{"memory.max": max, "memory.swap.max": "0"} {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(v), 0); err != nil && !(file == "memory.swap.max" && os.IsNotExist(err)) {
			t.Fatalf("%s: %v", file, err)
		}
	}
	return dir
}

// missingFunctions is a toolCase's lacks for a probe of a list of kernel
// functions of which the kernel must have one ftrace can reach
// (available_filter_functions: 6.12's blk_account_io_start is in kallsyms,
// an inline function's copy, notrace, which the kernel refuses to probe):
// refused, naming the first.
func missingFunctions(names ...string) func(t *testing.T) (string, string) {
	return func(t *testing.T) (string, string) {
		funcs, err := tracefs.Functions(names...)
		if err != nil {
			t.Fatal(err)
		}
		if len(funcs) > 0 {
			return "", ""
		}
		return strings.Join(names, " and "), "kprobe:" + names[0] + " names no kernel function that can be probed"
	}
}

// dropReasons is the names of skb:kfree_skb's reasons, and whether it
// has the field at all (5.17+).
func dropReasons(t *testing.T) ([]string, bool) {
	f, err := tracefs.ReadFormat("skb", "kfree_skb")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := f.Field("reason"); !ok {
		return nil, false
	}
	var names []string
	for _, name := range f.Symbolic["reason"] {
		names = append(names, name)
	}
	return names, true
}

// elfDefines says whether the ELF file at path defines the dynamic
// symbol name.
func elfDefines(t *testing.T, path, name string) bool {
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, _ := f.DynamicSymbols()
	for _, s := range syms {
		if s.Name == name && s.Section != elf.SHN_UNDEF {
			return true
		}
	}
	return false
}
