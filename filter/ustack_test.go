package filter

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/internal/tooltest"
	"github.com/tracekit/tracekit/procfs"
	"github.com/tracekit/tracekit/stacks/prog"
	"github.com/tracekit/tracekit/tracefs"
)

// ustackReport is a --json --count-by ustack report (profile's layout).
type ustackReport struct {
	Tool   string  `json:"tool"`
	Events *uint64 `json:"events"`
	Lost   uint64  `json:"lost"`
	Stacks []struct {
		Pid    uint32   `json:"pid"`
		Comm   string   `json:"comm"`
		Count  uint64   `json:"count"`
		User   []string `json:"user"`
		Kernel []string `json:"kernel"`
		End    string   `json:"end"`
	} `json:"stacks"`
}

func ustacks(t *testing.T, r tooltest.Result) ustackReport {
	t.Helper()
	var rep ustackReport
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.Stdout)), &rep); err != nil || rep.Events == nil {
		t.Fatalf("--json --count-by ustack: exit %d, %v: %q\n%s", r.Status, err, r.Stdout, r.Stderr)
	}
	return rep
}

// fx-chain's two ways to tk_leaf, the frames above it.
var (
	chainA = []string{"tk_b", "tk_a", "main"}
	chainB = []string{"tk_c", "main"}
)

// chainOf says which of fx-chain's chains a user stack went through (""
// if neither): the frames above tk_leaf.
func chainOf(user []string) string {
	i := slices.Index(user, "tk_leaf")
	if i < 0 {
		return ""
	}
	above := user[i+1:]
	switch {
	case len(above) >= len(chainA) && slices.Equal(above[:len(chainA)], chainA):
		return "a"
	case len(above) >= len(chainB) && slices.Equal(above[:len(chainB)], chainB):
		return "b"
	}
	return ""
}

// byChain sums a report's counts by fx-chain's chain, and counts the
// events whose user stack is whole (it ends where the process started).
func byChain(t *testing.T, rep ustackReport) (chains map[string]uint64, complete, total uint64) {
	t.Helper()
	chains = map[string]uint64{}
	for _, st := range rep.Stacks {
		chains[chainOf(st.User)] += st.Count
		total += st.Count
		if st.End == "complete" {
			complete += st.Count
		}
	}
	if total != *rep.Events {
		t.Errorf("the stacks sum to %d, the report says %d events", total, *rep.Events)
	}
	return chains, complete, total
}

// requireUnwinder skips where profile's in-kernel unwinder does not read
// the architecture's frames: on 32-bit ARM a user stack is walked by frame
// pointers only (profile --unwind=fp), and fx-chain, built without them,
// cannot be whole there (docs/design/kernel-matrix.md names these skips).
func requireUnwinder(t *testing.T) {
	t.Helper()
	if _, ok := prog.ArchOf(runtime.GOARCH); !ok {
		t.Skipf("%s: ustack walks frame pointers only here (the in-kernel unwinder reads x86-64, arm64 and riscv64 frames), and fx-chain has none", runtime.GOARCH)
	}
}

// Where profile's unwinder does not read the architecture's frames
// (32-bit ARM), --count-by ustack walks frame pointers and says so in one
// line; elsewhere it says nothing of it. Either way the 3 events count.
func TestUstackArchNotice(t *testing.T) {
	privtest.Require(t)
	fx := filepath.Join(fixtures(t), "fx-chain")
	r := filter(t, "--json", "--count-by", "ustack", "uprobe:"+fx+":tk_leaf", "-c", fx+" 2 1")
	rep := ustacks(t, r)
	_, unwinds := prog.ArchOf(runtime.GOARCH)
	fpOnly := !unwinds
	if said := strings.Contains(r.Stderr, "user stacks are walked by frame pointers only"); said != fpOnly || rep.Events == nil || *rep.Events != 3 {
		t.Errorf("on %s: stderr %q, events %v; want the frame-pointer notice: %v, and 3 events", runtime.GOARCH, r.Stderr, rep.Events, fpOnly)
	}
}

// --count-by ustack on a uprobe of a C program built without frame
// pointers: its 200 calls of tk_leaf through tk_a and tk_b and 100
// through tk_c, every one counted under its own chain, and at least 95%
// of the stacks whole, from tk_leaf to where the process started (the
// issue's bar; here all 300 are). --where on the uprobe's argument keeps
// the second chain's 100. On the host, bpftrace's @[ustack] = count() on
// the same probe walks frame pointers and stops: fewer than half its
// stacks reach main.
func TestUstackUprobe(t *testing.T) {
	privtest.Require(t)
	requireUnwinder(t)
	fx := filepath.Join(fixtures(t), "fx-chain")
	probe := "uprobe:" + fx + ":tk_leaf"
	r := filter(t, "--json", "--count-by", "ustack", probe, "-c", fx+" 200 100")
	rep := ustacks(t, r)
	chains, complete, total := byChain(t, rep)
	if total != 300 || chains["a"] != 200 || chains["b"] != 100 {
		t.Errorf("%d calls of tk_leaf, %d through tk_a and tk_b, %d through tk_c; want 300, 200, 100:\n%s\n%s", total, chains["a"], chains["b"], r.Stdout, r.Stderr)
	}
	if complete*100 < total*95 {
		t.Errorf("%d of %d user stacks whole, fewer than 95%%:\n%s", complete, total, r.Stdout)
	}
	t.Logf("filter: %d of %d user stacks whole", complete, total)

	r = filter(t, "--json", "--count-by", "ustack", probe, "--where", "arg0 == 9", "-c", fx+" 20 10")
	chains, _, total = byChain(t, ustacks(t, r))
	if total != 10 || chains["b"] != 10 {
		t.Errorf("--where 'arg0 == 9': %d calls, %d through tk_c; want 10 and 10:\n%s", total, chains["b"], r.Stdout)
	}

	// Folded, for a flame graph: comm, then the frames outermost first.
	r = filter(t, "--count-by", "ustack", "--folded", probe, "-c", fx+" 20 10")
	want := map[string]int{"fx-chain;_start;__libc_start_main;__libc_start_call_main;main;tk_a;tk_b;tk_leaf": 20, "fx-chain;_start;__libc_start_main;__libc_start_call_main;main;tk_c;tk_leaf": 10}
	got := map[string]int{}
	for _, l := range lines(r.Stdout) {
		stack, n, _ := strings.Cut(l, " ")
		c, _ := strconv.Atoi(n)
		got[stack] += c
	}
	if r.Status != 0 || len(got) != len(want) {
		t.Errorf("--folded: exit %d, %v; want %v\n%s", r.Status, got, want, r.Stderr)
	}
	for stack, c := range want {
		// musl and other starts name their outer frames otherwise: the
		// chain from main down is what the fixture decides.
		tail := stack[strings.Index(stack, ";main;"):]
		n := 0
		for s, m := range got {
			if strings.HasPrefix(s, "fx-chain;") && strings.HasSuffix(s, tail) {
				n += m
			}
		}
		if n != c {
			t.Errorf("--folded: %d stacks ending %s, want %d: %v", n, tail, c, got)
		}
	}

	bt := tooltest.Peer(t, "bpftrace", "bpftrace")
	if bt == "" {
		return // in the guests; the host compares
	}
	out, err := exec.Command(bt, "-e", fmt.Sprintf(`uprobe:%s:tk_leaf { @[ustack] = count(); }`, fx), "-c", fx+" 200 100").CombinedOutput()
	if err != nil {
		t.Fatalf("bpftrace: %v\n%s", err, out)
	}
	var theirs, whole int
	for _, m := range regexp.MustCompile(`(?s)@\[\n(.*?)\n\]: (\d+)`).FindAllStringSubmatch(string(out), -1) {
		c, _ := strconv.Atoi(m[2])
		theirs += c
		if strings.Contains(m[1], "main") {
			whole += c
		}
	}
	t.Logf("bpftrace: %d of %d user stacks reach main\n%s", whole, theirs, out)
	if theirs != 300 || whole*2 >= theirs {
		t.Errorf("bpftrace counted %d calls, %d of them with main in the stack: want 300, and fewer than half (the fixture keeps no frame pointers)\n%s", theirs, whole, out)
	}
}

// Interval reports of --count-by ustack start again each time, and add up
// to the events exactly: the kernel's counts are drained by flipping its
// two hashes (profile/prog.CountsSwap) at every report and every second,
// while fx-chain's 30000 calls of tk_leaf go on.
func TestUstackIntervalsExact(t *testing.T) {
	privtest.Require(t)
	fx := filepath.Join(fixtures(t), "fx-chain")
	r := filter(t, "--json", "--count-by", "ustack", "uprobe:"+fx+":tk_leaf", "0.05", "-c", fx+" 20000 10000")
	var reports int
	var total, lost uint64
	for _, l := range lines(r.Stdout) {
		var rep ustackReport
		if err := json.Unmarshal([]byte(l), &rep); err != nil || rep.Events == nil {
			t.Fatalf("a --json report line: %v: %q\n%s", err, l, r.Stderr)
		}
		reports++
		_, _, n := byChain(t, rep)
		total += n
		lost += rep.Lost
	}
	if r.Status != 0 || total != 30000 || lost != 0 {
		t.Errorf("exit %d; %d reports counted %d calls of tk_leaf, %d lost; want 30000, none lost:\n%s\n%s", r.Status, reports, total, lost, r.Stdout, r.Stderr)
	}
	if reports < 3 {
		t.Errorf("%d reports; want the run's several:\n%s", reports, r.Stdout)
	}
	t.Logf("%d calls in %d reports", total, reports)
}

// --count-by ustack,kstack on a tracepoint (a syscall's): the user stack
// comes from the task's registers, not the record; fx-chain's pwrites at
// fd 987654, 20 through tk_a and tk_b and 10 through tk_c, each stack's
// user part through libc's pwrite into tk_leaf and its chain, its kernel
// part a stack of this kernel's functions.
func TestUstackTracepoint(t *testing.T) {
	privtest.Require(t)
	requireUnwinder(t)
	syms, err := procfs.LoadKallsyms()
	if err != nil {
		t.Fatal(err)
	}
	fx := filepath.Join(fixtures(t), "fx-chain")
	r := filter(t, "--json", "--count-by", "ustack,kstack", "syscalls:sys_enter_pwrite64", "--where", "fd == 987654", "-c", fx+" 20 10")
	rep := ustacks(t, r)
	chains, complete, total := byChain(t, rep)
	if total != 30 || chains["a"] != 20 || chains["b"] != 10 {
		t.Errorf("%d pwrites, %d through tk_a and tk_b, %d through tk_c; want 30, 20, 10:\n%s\n%s", total, chains["a"], chains["b"], r.Stdout, r.Stderr)
	}
	if complete*100 < total*95 {
		t.Errorf("%d of %d user stacks whole, fewer than 95%%:\n%s", complete, total, r.Stdout)
	}
	noKernel := syscallTracepointUserRegs(t)
	for _, st := range rep.Stacks {
		if noKernel {
			// None from the sampler either: none read, or an error.
			if len(st.Kernel) > 1 || len(st.Kernel) == 1 && st.Kernel[0] != "[kernel stack lost]" {
				t.Errorf("a kernel stack where this kernel gives none: %v", st.Kernel)
			}
			continue
		}
		if len(st.Kernel) == 0 {
			t.Errorf("a stack without kernel frames: %+v", st)
			continue
		}
		if outer := st.Kernel[len(st.Kernel)-1]; !syms.Has(outer) {
			t.Errorf("outermost kernel frame %q: not a function of this kernel's: %v", outer, st.Kernel)
		}
		if i := slices.Index(st.User, "tk_leaf"); i < 1 {
			t.Errorf("user stack %v: want libc's pwrite, then tk_leaf", st.User)
		}
	}
}

// Keys and options that a stack counted by profile's unwinder does not
// take are refused with one line, exit 2.
func TestUstackUsage(t *testing.T) {
	for _, args := range [][]string{
		{"--count-by", "ustack,comm", "syscalls:sys_enter_write"},
		{"--fields", "comm,ustack", "syscalls:sys_enter_open*"},
		{"--hist", "ustack", "syscalls:sys_enter_write"},
		{"--where", "ustack > 0", "syscalls:sys_enter_write"},
		{"--sum", "count", "--count-by", "ustack", "syscalls:sys_enter_write"},
		{"--count-by", "ustack", "--serve", ":0", "syscalls:sys_enter_write"},
		{"--count-by", "ustack", "--max-keys", "100", "syscalls:sys_enter_write"},
		{"--count-by", "ustack", "syscalls:sys_enter_open*"},
		{"--count-by", "ustack", "--attach", "fentry", "syscalls:sys_enter_write"},
	} {
		r := filter(t, args...)
		first, _, _ := strings.Cut(r.Stderr, "\n")
		if r.Status != 2 || strings.Contains(r.Stderr, "goroutine") || !strings.Contains(first, "ustack") && !strings.Contains(first, "perf") {
			t.Errorf("filter %q: exit %d, want 2 and a line on ustack:\n%s", args, r.Status, r.Stderr)
		}
	}
}

// --count-by ustack,kstack at a kprobe: the context is the kernel's
// registers, so the user stack comes from the task's, as at a
// tracepoint. fx-chain's pwrites reach the kernel's pwrite64 (the
// syscall's wrapper, or ksys_pwrite64 where the kernel has it); -c keeps
// the command's 20 and 10, each under its chain. Where the kernel has no
// kprobes (the host), the matrix's kernels run it.
func TestUstackKprobe(t *testing.T) {
	privtest.Require(t)
	requireUnwinder(t)
	if !tracefs.KprobesAvailable() {
		t.Skip("this kernel has no kprobes: the matrix's kernels run this test")
	}
	fns, err := tracefs.Functions("ksys_pwrite64", "__x64_sys_pwrite64", "__arm64_sys_pwrite64", "__riscv_sys_pwrite64")
	if err != nil || len(fns) == 0 {
		t.Fatalf("no pwrite64 function to probe in available_filter_functions: %v", err)
	}
	fx := filepath.Join(fixtures(t), "fx-chain")
	r := filter(t, "--json", "--count-by", "ustack,kstack", "kprobe:"+fns[0], "-c", fx+" 20 10")
	rep := ustacks(t, r)
	chains, complete, total := byChain(t, rep)
	if total != 30 || chains["a"] != 20 || chains["b"] != 10 || complete*100 < total*95 {
		t.Errorf("kprobe:%s: %d pwrites, %d through tk_a and tk_b, %d through tk_c, %d whole; want 30, 20, 10, 95%% whole:\n%s\n%s", fns[0], total, chains["a"], chains["b"], complete, r.Stdout, r.Stderr)
	}
	for _, st := range rep.Stacks {
		if len(st.Kernel) == 0 || !slices.Contains(st.Kernel, fns[0]) && !strings.Contains(strings.Join(st.Kernel, " "), "pwrite64") {
			t.Errorf("kernel stack %v: want the probed function's callers", st.Kernel)
		}
	}
}

// --fields arg0,ustack prints each call of tk_leaf with its argument and
// its user stack, unwound by the same sampler: 20 with 7 through tk_a
// and tk_b, 10 with 9 through tk_c, every stack whole (no marker of a
// walk cut short), in --json a list, in text under the event's line.
func TestUstackFields(t *testing.T) {
	privtest.Require(t)
	requireUnwinder(t)
	fx := filepath.Join(fixtures(t), "fx-chain")
	probe := "uprobe:" + fx + ":tk_leaf"
	r := filter(t, "--json", "--fields", "arg0,ustack", probe, "-c", fx+" 20 10")
	byArg := map[uint64]map[string]int{}
	for _, l := range lines(r.Stdout) {
		var ev struct {
			Comm   string `json:"comm"`
			Fields struct {
				Arg0   uint64   `json:"arg0"`
				Ustack []string `json:"ustack"`
			} `json:"fields"`
		}
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatalf("%v: %q", err, l)
		}
		if byArg[ev.Fields.Arg0] == nil {
			byArg[ev.Fields.Arg0] = map[string]int{}
		}
		chain := chainOf(ev.Fields.Ustack)
		if n := len(ev.Fields.Ustack); ev.Comm != "fx-chain" || n == 0 || strings.HasPrefix(ev.Fields.Ustack[n-1], "[") {
			chain = "cut: " + strings.Join(ev.Fields.Ustack, ";")
		}
		byArg[ev.Fields.Arg0][chain]++
	}
	if len(byArg) != 2 || byArg[7]["a"] != 20 || byArg[9]["b"] != 10 {
		t.Errorf("calls by argument and chain: %v; want 20 of 7 through tk_a, 10 of 9 through tk_c, all whole\n%s\n%s", byArg, r.Stdout, r.Stderr)
	}

	// At a tracepoint, with the kernel's stack: both, in the order named.
	r = filter(t, "--json", "--fields", "count,kstack,ustack", "syscalls:sys_enter_pwrite64", "--where", "fd == 987654", "-c", fx+" 2 1")
	n, noKernel := 0, syscallTracepointUserRegs(t)
	for _, l := range lines(r.Stdout) {
		var ev struct {
			Fields struct {
				Count  uint64   `json:"count"`
				Kstack []string `json:"kstack"`
				Ustack []string `json:"ustack"`
			} `json:"fields"`
		}
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatalf("%v: %q", err, l)
		}
		n++
		f := ev.Fields
		want := map[uint64]string{7: "a", 9: "b"}[f.Count]
		none := len(f.Kstack) == 1 && f.Kstack[0] == "[no kernel stack]"
		if none != noKernel || len(f.Kstack) == 0 || strings.HasPrefix(f.Kstack[0], "[") && !none || chainOf(f.Ustack) != want || want == "" {
			t.Errorf("count %d: kstack %v, ustack %v; want a kernel stack, and chain %q under libc's pwrite", f.Count, f.Kstack, f.Ustack, want)
		}
	}
	if n != 3 {
		t.Errorf("%d pwrites printed, want 3:\n%s\n%s", n, r.Stdout, r.Stderr)
	}

	r = filter(t, "--fields", "arg0,ustack", probe, "-c", fx+" 2 1")
	var events, frames int
	for _, l := range lines(r.Stdout) {
		switch {
		case strings.Contains(l, ": tk_leaf: arg0="):
			events++
		case strings.HasPrefix(l, "    "):
			frames++
		}
	}
	if r.Status != 0 || events != 3 || frames < 3*4 {
		t.Errorf("text: exit %d, %d events, %d frame lines; want 3 events, each with its stack under it\n%s%s", r.Status, events, frames, r.Stdout, r.Stderr)
	}
}

// syscallTracepointUserRegs says whether this kernel hands a syscall's
// tracepoint program, through perf, the user's registers, so that it has
// no kernel stack (5.10, arm64's 6.1): as filter's own --fields kstack
// at the same tracepoint finds, for one pwrite of fx-chain.
func syscallTracepointUserRegs(t *testing.T) bool {
	t.Helper()
	fx := filepath.Join(fixtures(t), "fx-chain")
	r := filter(t, "--json", "--attach", "perf", "--fields", "count,kstack", "syscalls:sys_enter_pwrite64", "--where", "fd == 987654", "-c", fx+" 1 0")
	var ev struct {
		Fields struct {
			Kstack []string `json:"kstack"`
		} `json:"fields"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.Stdout)), &ev); err != nil || len(ev.Fields.Kstack) == 0 {
		t.Fatalf("--fields count,kstack: %v: %q\n%s", err, r.Stdout, r.Stderr)
	}
	return ev.Fields.Kstack[0] == "[no kernel stack]"
}

// usym(arg0) names a user code address by the process's own symbols:
// fx-chain's 3 calls of tk_call(tk_nop, i) print usym(arg0)=tk_nop, and
// count under the key tk_nop. The process is named while it runs (its
// maps read then), so it sleeps after its calls; reports every second
// name it, the last after it has exited too.
func TestUsym(t *testing.T) {
	privtest.Require(t)
	fx := filepath.Join(fixtures(t), "fx-chain")
	probe := "uprobe:" + fx + ":tk_call"
	r := filter(t, "--fields", "arg1,usym(arg0)", probe, "-c", fx+" 0 0 3 1000")
	want := "tk_call: arg1=0 usym(arg0)=tk_nop\n" + "tk_call: arg1=1 usym(arg0)=tk_nop\n" + "tk_call: arg1=2 usym(arg0)=tk_nop\n"
	var got strings.Builder
	for _, l := range lines(r.Stdout) {
		if _, rest, ok := strings.Cut(l, ": tk_call:"); ok {
			got.WriteString("tk_call:" + rest + "\n")
		}
	}
	if got.String() != want {
		t.Errorf("--fields arg1,usym(arg0):\n%s\nwant\n%s%s", got.String(), want, r.Stderr)
	}

	r = filter(t, "--json", "--cumulative", "--count-by", "usym(arg0)", probe, "-c", fx+" 0 0 3 2500", "1")
	reports := lines(r.Stdout)
	if len(reports) == 0 {
		t.Fatalf("no report: %s", r.Stderr)
	}
	var last countByReport
	if err := json.Unmarshal([]byte(reports[len(reports)-1]), &last); err != nil {
		t.Fatal(err)
	}
	if len(last.Counts) != 1 || last.Counts[0].Key["usym(arg0)"] != "tk_nop" || last.Counts[0].Count != 3 {
		t.Errorf("--count-by usym(arg0), the last report: %+v; want tk_nop 3\n%s", last.Counts, r.Stdout)
	}

	for _, args := range [][]string{
		{"--where", "usym(arg0) == 1", probe},
		{"--count-by", "usym(arg0) + 1", probe},
		{"--fields", "usym(comm)", probe},
	} {
		if r := filter(t, args...); r.Status != 2 || !strings.Contains(r.Stderr, "usym") {
			t.Errorf("filter %q: exit %d, want 2 and a line on usym:\n%s", args, r.Status, r.Stderr)
		}
	}
}
