package bpftrace_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/internal/tooltest"
)

// The lessons of bpftrace 0.17's one-liner tutorial
// (docs/tutorial_one_liners.md), each run as the tutorial writes it on a
// workload that makes its events a known number of times, by ours and,
// on the host, by bpftrace: what the workload's events make is checked
// exactly, and where both outputs are deterministic they are the same
// bytes. A one-liner runs until Ctrl-C in the tutorial; here -c's
// command ends it (bpftrace's by /usr/bin/env: its -c takes no name that
// both /bin and /usr/bin hold). Lesson 5's pid is -c's command's (cpid, for the
// tutorial's "pid == 18644"). The kprobe lessons (6, 7, 12) run where
// the kernel has kprobes: the kernel matrix's guests.

// both runs a one-liner through ours and, where it runs, bpftrace, with
// cmd as -c's command ("": none).
func both(t *testing.T, cmd string, args ...string) (ours, theirs *tooltest.Result) {
	t.Helper()
	withCmd := func(c string) []string {
		if cmd == "" {
			return args
		}
		return append([]string{"-c", c}, args...)
	}
	r := tooltest.Run(t, tooltest.Tool(t, "bpftrace"), withCmd(cmd)...)
	if r.Status != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.Status, r.Stdout, r.Stderr)
	}
	if bt := peer(t); bt != "" {
		p := tooltest.Run(t, bt, withCmd(peerCommand(cmd))...)
		if p.Status != 0 {
			t.Fatalf("bpftrace: exit %d\nstdout: %s\nstderr: %s", p.Status, p.Stdout, p.Stderr)
		}
		return &r, &p
	}
	return &r, nil
}

// write makes a file of text.
func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// mapValue is the value printed for key in a map of one line an element
// ("@name[key]: N"), -1 if none.
func mapValue(out, name, key string) int64 {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name+"["+key+"]: ") + `(\d+)$`).FindStringSubmatch(out)
	if m == nil {
		return -1
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n
}

// bucket is the count of a hist's or lhist's row whose label is label.
func bucket(out, label string) int64 {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(label) + `\s+(\d+) \|`).FindStringSubmatch(out)
	if m == nil {
		return -1
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n
}

func TestTutorial(t *testing.T) {
	privtest.Require(t)
	t.Run("1 listing probes", func(t *testing.T) {
		ours, theirs := both(t, "", "-l", "tracepoint:syscalls:sys_enter_*")
		if !strings.Contains(ours.Stdout, "tracepoint:syscalls:sys_enter_openat\n") {
			t.Errorf("no sys_enter_openat listed:\n%s", ours.Stdout)
		}
		if theirs != nil && theirs.Stdout != ours.Stdout {
			t.Errorf("bpftrace listed:\n%s\nours:\n%s", theirs.Stdout, ours.Stdout)
		}
	})
	t.Run("2 hello world", func(t *testing.T) {
		ours, theirs := both(t, "true", "-e", `BEGIN { printf("hello world\n"); }`)
		if want := "Attaching 1 probe...\nhello world\n"; !strings.HasPrefix(ours.Stdout, want) {
			t.Errorf("printed %q, want %q first", ours.Stdout, want)
		}
		if theirs != nil && theirs.Stdout != ours.Stdout {
			t.Errorf("bpftrace printed %q, ours %q", theirs.Stdout, ours.Stdout)
		}
	})
	t.Run("3 file opens", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "lesson3")
		write(t, path, "")
		const comm = "tklesson3"
		ours, theirs := both(t, tooltest.Opens(t, comm, tooltest.Open{Path: path, Times: 7}), "-e",
			`tracepoint:syscalls:sys_enter_openat { printf("%s %s\n", comm, str(args->filename)); }`)
		lines := func(out string) []string {
			var ls []string
			for _, l := range strings.Split(out, "\n") {
				if strings.HasPrefix(l, comm+" ") {
					ls = append(ls, l)
				}
			}
			return ls
		}
		want := strings.TrimSuffix(strings.Repeat(comm+" "+path+"\n", 7), "\n")
		if got := strings.Join(lines(ours.Stdout), "\n"); got != want {
			t.Errorf("the workload's opens:\n%s\nwant:\n%s", got, want)
		}
		if theirs != nil && strings.Join(lines(theirs.Stdout), "\n") != want {
			t.Errorf("bpftrace's lines of the workload:\n%s", strings.Join(lines(theirs.Stdout), "\n"))
		}
	})
	t.Run("4 syscall counts by process", func(t *testing.T) {
		ours, theirs := both(t, tooltest.Writes(t, 4321, 50), "-e", `tracepoint:raw_syscalls:sys_enter { @[comm] = count(); }`)
		for who, r := range map[string]*tooltest.Result{"ours": ours, "bpftrace": theirs} {
			if r == nil {
				continue
			}
			if n := mapValue(r.Stdout, "@", workloadComm()); n < 50 {
				t.Errorf("%s: @[%s] %d, want at least its 50 writes:\n%s", who, workloadComm(), n, r.Stdout)
			}
		}
	})
	const dd = "dd if=/dev/zero of=/dev/null bs=4321 count=50"
	t.Run("5 distribution of read bytes", func(t *testing.T) {
		ours, theirs := both(t, dd, "-e", `tracepoint:syscalls:sys_exit_read /pid == cpid/ { @bytes = hist(args->ret); }`)
		for who, r := range map[string]*tooltest.Result{"ours": ours, "bpftrace": theirs} {
			if r == nil {
				continue
			}
			if n := bucket(r.Stdout, "[4K, 8K)"); n != 50 {
				t.Errorf("%s: [4K, 8K) counts %d reads, want dd's 50:\n%s", who, n, r.Stdout)
			}
		}
		// The rest differs: before its exec the command waits for the
		// tracer, bpftrace's on an eventfd (a read of 8 bytes), ours in
		// a shell's read of a pipe (reads of 1 byte).
	})
	t.Run("6 kernel dynamic tracing of read bytes", func(t *testing.T) {
		privtest.RequireKprobes(t)
		ours, _ := both(t, "dd if=/dev/zero of=/dev/null bs=1500 count=50", "-e", `kretprobe:vfs_read { @bytes = lhist(retval, 0, 2000, 200); }`)
		if n := bucket(ours.Stdout, "[1400, 1600)"); n < 50 {
			t.Errorf("[1400, 1600) counts %d reads, want dd's 50 at least:\n%s", n, ours.Stdout)
		}
	})
	t.Run("7 timing reads", func(t *testing.T) {
		privtest.RequireKprobes(t)
		ours, _ := both(t, dd, "-e", `kprobe:vfs_read { @start[tid] = nsecs; } kretprobe:vfs_read /@start[tid]/ { @ns[comm] = hist(nsecs - @start[tid]); delete(@start[tid]); }`)
		i := strings.Index(ours.Stdout, "@ns[dd]: \n")
		if i < 0 {
			t.Fatalf("no @ns[dd]:\n%s", ours.Stdout)
		}
		var total int64
		for _, m := range regexp.MustCompile(`(?m)^\S.*?\s+(\d+) \|`).FindAllStringSubmatch(strings.SplitN(ours.Stdout[i:], "\n\n", 2)[0], -1) {
			n, _ := strconv.ParseInt(m[1], 10, 64)
			total += n
		}
		if total < 50 {
			t.Errorf("@ns[dd] counts %d reads, want its 50 at least:\n%s", total, ours.Stdout)
		}
	})
	t.Run("8 count process-level events", func(t *testing.T) {
		ours, theirs := both(t, "", "-e", `tracepoint:sched:sched* { @[probe] = count(); } interval:s:5 { exit(); }`)
		attaching := regexp.MustCompile(`^Attaching (\d+) probes`)
		m := attaching.FindStringSubmatch(ours.Stdout)
		if m == nil || mapValue(ours.Stdout, "@", "tracepoint:sched:sched_switch") <= 0 {
			t.Errorf("no sched_switch counted:\n%s", ours.Stdout)
		}
		if theirs != nil {
			if p := attaching.FindStringSubmatch(theirs.Stdout); p == nil || m == nil || p[1] != m[1] {
				t.Errorf("bpftrace: %q, ours: %q", p, m)
			}
		}
	})
	t.Run("9 profile on-CPU kernel stacks", func(t *testing.T) {
		ours, _ := both(t, tooltest.SpinThread(t, 1), "-e", `profile:hz:99 { @[kstack] = count(); }`)
		if !regexp.MustCompile(`(?m)^@\[\n(    \S+\n)*\]: \d+$`).MatchString(ours.Stdout) {
			t.Errorf("no stack counted:\n%s", ours.Stdout)
		}
	})
	t.Run("10 scheduler tracing", func(t *testing.T) {
		ours, _ := both(t, "sleep 0.2", "-e", `tracepoint:sched:sched_switch { @[kstack] = count(); }`)
		if !regexp.MustCompile(`(?m)^    \S*schedule\S*\+\d+$`).MatchString(ours.Stdout) {
			t.Errorf("no stack through the scheduler:\n%s", ours.Stdout)
		}
	})
	t.Run("11 block I/O tracing", func(t *testing.T) {
		dev := tooltest.LoopDevice(t)
		ours, _ := both(t, fmt.Sprintf("dd if=/dev/zero of=%s bs=4k count=57 oflag=direct", dev), "-e", `tracepoint:block:block_rq_issue { @ = hist(args->bytes); }`)
		if n := bucket(ours.Stdout, "[4K, 8K)"); n < 57 {
			t.Errorf("[4K, 8K) counts %d IOs, want dd's 57 at least:\n%s", n, ours.Stdout)
		}
	})
	t.Run("12 kernel struct tracing", func(t *testing.T) {
		privtest.RequireKprobes(t)
		if privtest.NoBTF(t) {
			t.Skip("struct path is the kernel's BTF's, which this kernel does not publish (32-bit ARM's)")
		}
		path := filepath.Join(t.TempDir(), "tklesson12")
		write(t, path, "")
		script := filepath.Join(t.TempDir(), "path.bt")
		write(t, script, "#include <linux/path.h>\n#include <linux/dcache.h>\n\nkprobe:vfs_open\n{\n\tprintf(\"open path: %s\\n\", str(((struct path *)arg0)->dentry->d_name.name));\n}\n")
		ours, _ := both(t, tooltest.Opens(t, "", tooltest.Open{Path: path, Times: 3}), script)
		if n := strings.Count(ours.Stdout, "open path: tklesson12\n"); n != 3 {
			t.Errorf("%d opens of tklesson12 printed, want 3:\n%s", n, ours.Stdout)
		}
	})
}
