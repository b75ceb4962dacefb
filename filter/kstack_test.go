package filter

import (
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/internal/tooltest"
	"github.com/tracekit/tracekit/procfs"
)

// decimalOffsets writes a frame's offset in decimal, as bpftrace does:
// name+0x1f is name+31.
func decimalOffsets(frame string) string {
	name, off, ok := strings.Cut(frame, "+0x")
	if !ok {
		return frame
	}
	n, err := strconv.ParseUint(off, 16, 64)
	if err != nil {
		return frame
	}
	return name + "+" + strconv.FormatUint(n, 10)
}

// --count-by kstack: a workload's 9 opens counted by the kernel's stack,
// every one of them, the outermost frame a function of this kernel's
// kallsyms; through perf, the same stacks and counts as bpftrace's
// @[kstack] = count() on the same workload (on the host: the guests have
// no bpftrace).
func TestKstack(t *testing.T) {
	privtest.Require(t)
	syms, err := procfs.LoadKallsyms()
	if err != nil {
		t.Fatal(err)
	}
	tooltest.ForEachSyscallHook(t, "openat", func(t *testing.T) {
		a := t.TempDir() + "/a"
		openFiles(t, a)
		const n = 9
		work := tooltest.Opens(t, "tk-kstack", tooltest.Open{Path: a, Times: n})
		rep, r := countByJSON(t, "kstack", "syscalls:sys_enter_openat", "--where", `comm == "tk-kstack"`, "-c", work)
		ours := map[string]int{}
		total := 0
		for _, c := range rep.Counts {
			raw, _ := c.Key["kstack"].([]any)
			var frames []string
			for _, f := range raw {
				s, _ := f.(string)
				frames = append(frames, decimalOffsets(s))
			}
			if len(frames) == 0 {
				t.Errorf("a stack without frames: %v", c.Key)
				continue
			}
			fn, _, _ := strings.Cut(frames[len(frames)-1], "+")
			if !syms.Has(fn) {
				t.Errorf("outermost frame %q: not a function of this kernel's", frames[len(frames)-1])
			}
			ours[strings.Join(frames, "\n")] += int(c.Count)
			total += int(c.Count)
		}
		if total != n {
			t.Fatalf("%d opens counted by stack, want %d: %+v\n%s", total, n, rep.Counts, r.Stderr)
		}
		// Folded, for a flame graph: functions outermost first, then the count.
		r = filter(t, "--count-by", "kstack", "--folded", "syscalls:sys_enter_openat", "--where", `comm == "tk-kstack"`, "-c", work)
		folded := 0
		for _, l := range lines(r.Stdout) {
			m := regexp.MustCompile(`^([A-Za-z0-9_.;]+) (\d+)$`).FindStringSubmatch(l)
			if m == nil {
				t.Errorf("--folded line %q: want FUNCTION;...;FUNCTION COUNT", l)
				continue
			}
			c, _ := strconv.Atoi(m[2])
			folded += c
		}
		if r.Status != 0 || folded != n {
			t.Errorf("--folded: exit %d, %d opens, want %d:\n%s%s", r.Status, folded, n, r.Stdout, r.Stderr)
		}
		if !strings.HasSuffix(t.Name(), "/perf") {
			return // bpftrace's tracepoint program sees perf's stack
		}
		bt := tooltest.Peer(t, "bpftrace", "bpftrace")
		if bt == "" {
			return // in the guests; the host compares
		}
		out, err := exec.Command(bt, "-e", `tracepoint:syscalls:sys_enter_openat /comm == "tk-kstack"/ { @[kstack] = count(); }`, "-c", work).CombinedOutput()
		if err != nil {
			t.Fatalf("bpftrace: %v\n%s", err, out)
		}
		theirs := map[string]int{}
		for _, m := range regexp.MustCompile(`(?s)@\[\n(.*?)\n\]: (\d+)`).FindAllStringSubmatch(string(out), -1) {
			var frames []string
			for _, l := range strings.Split(m[1], "\n") {
				frames = append(frames, strings.TrimSpace(l))
			}
			c, _ := strconv.Atoi(m[2])
			theirs[strings.Join(frames, "\n")] += c
		}
		if len(ours) != len(theirs) {
			t.Errorf("filter counted %d stacks, bpftrace %d:\n%v\n%s", len(ours), len(theirs), ours, out)
		}
		for stack, c := range ours {
			if theirs[stack] != c {
				t.Errorf("stack\n%s\nfilter %d, bpftrace %d\n%s", stack, c, theirs[stack], out)
			}
		}
	})
}
