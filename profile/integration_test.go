package profile

import (
	"bufio"
	"debug/elf"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tracekit/tracekit/internal/stacktest"
	"github.com/tracekit/tracekit/stacks"
	"github.com/tracekit/tracekit/symbols"

	"github.com/cilium/ebpf"
	"github.com/google/pprof/profile"

	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/internal/tooltest"
	"github.com/tracekit/tracekit/ldso"
	"github.com/tracekit/tracekit/perfevent"
	"github.com/tracekit/tracekit/stacks/prog"
	"github.com/tracekit/tracekit/unwind"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) { tooltest.Main(m) }

type report struct {
	Samples int                `json:"samples"`
	Usecs   int                `json:"usecs"` // --off-cpu
	Lost    int                `json:"lost"`
	Stacks  []stacks.JSONStack `json:"stacks"`
}

// profileJSON runs profile --json with args and parses its one report.
func profileJSON(t *testing.T, args ...string) report {
	t.Helper()
	res := tooltest.Run(t, tooltest.Tool(t, "profile"), append([]string{"--json"}, args...)...)
	if res.Status != 0 {
		t.Fatalf("profile %v: status %d\n%s", args, res.Status, res.Stderr)
	}
	var r report
	if err := json.Unmarshal([]byte(res.Stdout), &r); err != nil {
		t.Fatalf("profile %v: %v\n%s", args, err, res.Stdout)
	}
	return r
}

// hasChain reports whether a user stack (leaf first) holds c, b, a, main
// in a row, and ends at _start.
func hasChain(user []string) bool {
	if len(user) == 0 || user[len(user)-1] != "_start" {
		return false
	}
	want := []string{"c", "b", "a", "main"}
	for i := 0; i+len(want) <= len(user); i++ {
		ok := true
		for j, w := range want {
			if user[i+j] != w {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// chainShare is the share of comm's samples taken in c (c in the user
// stack: its leaf, or under read(2) in libc) whose user stack is the whole
// chain, complete (or walked by frame pointers to _start); and how many
// samples were taken in c. Samples of the
// process's start (the dynamic loader) are no chain of ours.
// With inC false, all of comm's samples count.
func chainShare(r report, comm string, inC bool) (float64, int) {
	var all, chain int
	for _, st := range r.Stacks {
		if st.Comm != comm || inC && !slices.Contains(st.User, "c") {
			continue
		}
		all += int(st.Count)
		if (st.End == "complete" || st.End == "frame pointers") && hasChain(st.User) {
			chain += int(st.Count)
		}
	}
	if all == 0 {
		return 0, 0
	}
	return float64(chain) / float64(all), all
}

// TestChainWithoutFramePointers profiles gcc -O2 -fomit-frame-pointer
// fixtures spinning in c (main -> a -> b -> c): the in-kernel unwinder gets
// the whole chain from _start in at least 95% of the samples, and frame
// pointers do not (so it is the unwinder that does the work). A PIE, a
// non-PIE, the chain in a shared library, and c spinning in read(2) (kernel
// frames above the whole user chain).
//
// The same on x86-64 and arm64 (where the return address of the sampled
// frame may still be in x30, and is signed by pointer authentication
// where the code asks).
func TestChainWithoutFramePointers(t *testing.T) {
	stacktest.RequireUnwinder(t)
	privtest.Require(t)
	dir := stacktest.Fixtures(t)
	unwinder := "--unwind=eh"
	for _, c := range []struct{ name, bin, mode string }{
		{"pie", "chain-pie", "user"},
		{"nopie", "chain-nopie", "user"},
		{"shared-lib", "chain-lib", "user"},
		{"syscall", "chain-pie", "syscall"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := filepath.Join(dir, c.bin) + " 1.5 " + c.mode
			eh := profileJSON(t, "-F", "199", unwinder, "-c", cmd)
			share, n := chainShare(eh, c.bin, true)
			t.Logf("%s: %d samples of %s, %.1f%% whole chain", unwinder, n, c.bin, 100*share)
			if n < 100 || share < 0.95 {
				t.Errorf("%s: %.1f%% of %d samples have the whole chain, want at least 95%% of 100 or more", unwinder, 100*share, n)
				for _, st := range eh.Stacks {
					t.Logf("%d %s %v | %v", st.Count, st.End, st.User, st.Kernel)
				}
			}
			if c.mode == "syscall" {
				var inKernel int
				for _, st := range eh.Stacks {
					if st.Comm == c.bin && len(st.Kernel) > 0 && hasChain(st.User) && st.User[0] != "c" {
						inKernel += int(st.Count)
					}
				}
				if inKernel < n/2 {
					t.Errorf("only %d of %d samples are in the kernel under read() with the whole user chain", inKernel, n)
				}
			}
			if c.mode == "syscall" {
				return // chain-pie's frame pointers: the pie case showed there are none
			}
			fp := profileJSON(t, "-F", "199", "--unwind=fp", "-c", cmd)
			share, n = chainShare(fp, c.bin, false)
			t.Logf("fp: %d samples of %s, %.1f%% whole chain", n, c.bin, 100*share)
			if n < 100 || share > 0.5 {
				t.Errorf("--unwind=fp: %.1f%% of %d samples have the whole chain: the fixture keeps frame pointers, the test proves nothing", 100*share, n)
			}
		})
	}
}

// TestConstructor: chain-lib's library runs the chain in its constructor
// (CHAIN_CTOR), called by the loader's start code (glibc's _dl_start_user
// calls _dl_init, which runs the constructors), which has no unwind row:
// its stacks end there whole, as "complete", not "no unwind row".
func TestConstructor(t *testing.T) {
	stacktest.RequireUnwinder(t)
	privtest.Require(t)
	if runtime.GOARCH == "riscv64" {
		// Its ld.so has 16 FDEs (gcc writes none for C there unasked): the
		// walk stops at call_init, before the start code.
		t.Skip("riscv64: Debian's ld.so has no unwind rows for _dl_init and call_init")
	}
	t.Setenv("CHAIN_CTOR", "1.5")
	fx := filepath.Join(stacktest.Fixtures(t), "chain-lib")
	r := profileJSON(t, "-F", "199", "-c", fx+" 0 user now")
	var n, whole int
	for _, st := range r.Stacks {
		if st.Comm != "chain-lib" || len(st.User) < 3 || st.User[0] != "c" {
			continue
		}
		n += int(st.Count)
		if st.End == "complete" && slices.Equal(st.User[:3], []string{"c", "b", "a"}) && len(st.User) >= 5 {
			whole += int(st.Count)
		}
	}
	t.Logf("%d of %d samples in c whole, through the loader's start", whole, n)
	if n < 100 || whole*10 < n*9 {
		t.Errorf("%d of %d samples in c whole, want 90%% of 100 or more", whole, n)
		logStacks(t, r.Stacks)
	}
}

// TestFramePointers profiles chain-fp, the chain built with frame
// pointers, with --unwind=fp (riscv64's only way): the kernel's own walker
// (bpf_get_stack) gets from the spinning c up through a to main in at
// least 90% of the samples in c, on every architecture. b is not asserted:
// the walkers differ at a leaf (riscv64's takes the leaf's stale ra for
// its caller; x86-64's and arm64's skip the caller of a leaf that set up
// no frame).
func TestFramePointers(t *testing.T) {
	privtest.Require(t)
	fx := filepath.Join(stacktest.Fixtures(t), "chain-fp")
	rep := profileJSON(t, "-F", "199", "--unwind=fp", "-c", fx+" 1.5 user")
	var inC, chain uint64
	for _, st := range rep.Stacks {
		if st.Comm != "chain-fp" || len(st.User) == 0 || st.User[0] != "c" {
			continue
		}
		inC += st.Count
		if a := slices.Index(st.User, "a"); a > 0 && a+1 < len(st.User) && st.User[a+1] == "main" && st.End == "frame pointers" {
			chain += st.Count
		}
	}
	t.Logf("%d of %d samples in c walked to main", chain, inC)
	if inC < 100 || chain*10 < inC*9 {
		t.Errorf("%d of %d samples in c have c ... a, main, want at least 90%% of 100 or more", chain, inC)
		for _, st := range rep.Stacks {
			t.Logf("%d %s %v", st.Count, st.End, st.User)
		}
	}
	// Unasked, frame pointers are said to be all there is where they are
	// (32-bit ARM), and only there.
	res := tooltest.Run(t, tooltest.Tool(t, "profile"), "--json", "-F", "99", "-c", fx+" 0.3 user")
	_, unwinds := prog.ArchOf(runtime.GOARCH)
	fpOnly := !unwinds
	if said := strings.Contains(res.Stderr, "user stacks are walked by frame pointers only"); res.Status != 0 || said != fpOnly {
		t.Errorf("auto on %s: exit %d, stderr %q; want the frame-pointer notice: %v", runtime.GOARCH, res.Status, res.Stderr, fpOnly)
	}
}

// TestCommandChildFromFirstSample runs the chain as a child of -c's shell
// (the shell forks it: a command follows): its exec is announced, its
// tables are loaded while it first sleeps, and every sample taken in c has
// the whole chain. A child used to be read at its first sample only, and
// the samples taken until its tables loaded fell back to frame pointers,
// garbage here: one to eleven a run.
func TestCommandChildFromFirstSample(t *testing.T) {
	stacktest.RequireUnwinder(t)
	privtest.Require(t)
	dir := stacktest.Fixtures(t)
	r := profileJSON(t, "-F", "199", "-c", filepath.Join(dir, "chain-pie")+" 1.5 user; true")
	share, n := chainShare(r, "chain-pie", true)
	t.Logf("%d samples of chain-pie, %.1f%% whole chain", n, 100*share)
	if n < 100 || share != 1 {
		t.Errorf("%.1f%% of %d samples have the whole chain, want all of 100 or more", 100*share, n)
		for _, st := range r.Stacks {
			if st.Comm == "chain-pie" {
				t.Logf("%d %s %v | %v", st.Count, st.End, st.User, st.Kernel)
			}
		}
	}
}

// TestKernelModeBefore515 takes the pre-5.15 way to a kernel-mode
// sample's user registers (the top of the task's kernel stack, found
// through BTF, checked by the user code segment) on this kernel: c spinning
// in read(2) keeps its whole chain under the kernel frames.
func TestKernelModeBefore515(t *testing.T) {
	privtest.Require(t)
	if runtime.GOARCH != "amd64" {
		t.Skipf("the pre-5.15 path reads x86-64's pt_regs and code segment; on %s, whose pt_regs has no fixed size, a kernel-mode sample has no user stack before 5.15", runtime.GOARCH)
	}
	dir := stacktest.Fixtures(t)
	r := profileJSON(t, "-F", "199", "--unwind=eh", "--assume-missing=task_pt_regs", "-c", filepath.Join(dir, "chain-pie")+" 1.5 syscall")
	var inKernel, all int
	for _, st := range r.Stacks {
		if st.Comm != "chain-pie" || !slices.Contains(st.User, "c") && !strings.Contains(st.End, "no user registers") {
			continue
		}
		all += int(st.Count)
		if len(st.Kernel) > 0 && st.End == "complete" && hasChain(st.User) {
			inKernel += int(st.Count)
		}
	}
	t.Logf("%d of %d samples in the kernel with the whole user chain", inKernel, all)
	if all < 100 || float64(inKernel) < 0.5*float64(all) {
		t.Errorf("%d of %d samples are in the kernel with the whole user chain, want half or more", inKernel, all)
		for _, st := range r.Stacks {
			t.Logf("%d %s %v | %v", st.Count, st.End, st.User, st.Kernel)
		}
	}
}

// TestPython profiles Debian's python3.11 (built without frame pointers)
// in a busy pure-Python loop: at least 90% of its samples are complete.
func TestPython(t *testing.T) {
	privtest.Require(t)
	if os.Getenv("TRACEKIT_BIN") != "" {
		t.Skip("python3.11 runs on the host, not in the matrix's guests")
	}
	py := "/usr/bin/python3.11"
	tooltest.Install(t, "python3.11", func() bool { _, err := os.Stat(py); return err == nil })
	r := profileJSON(t, "-F", "199", "-c", py+` -c "
import time
end = time.time() + 1.5
i = 0
while time.time() < end: i += 1"`)
	var all, complete int
	for _, st := range r.Stacks {
		if st.Comm != "python3.11" {
			continue
		}
		all += int(st.Count)
		if st.End == "complete" && len(st.User) > 0 && st.User[len(st.User)-1] == "_start" {
			complete += int(st.Count)
		}
	}
	t.Logf("python3.11: %d of %d samples complete", complete, all)
	if all < 100 || float64(complete) < 0.9*float64(all) {
		t.Errorf("%d of %d python3.11 samples end at _start, want 90%% of 100 or more", complete, all)
	}
}

// TestFolded checks --folded: one "comm;root;...;leaf count" line per
// stack, the chain root first, and the fixture's counts adding up to the
// samples its CPU time makes at 199 Hz (as it reports from getrusage).
func TestFolded(t *testing.T) {
	stacktest.RequireUnwinder(t)
	privtest.Require(t)
	dir := stacktest.Fixtures(t)
	res := tooltest.Run(t, tooltest.Tool(t, "profile"), "-F", "199", "--folded", "-c", filepath.Join(dir, "chain-nopie")+" 1")
	if res.Status != 0 {
		t.Fatalf("status %d\n%s", res.Status, res.Stderr)
	}
	// Samples in c: the whole chain, in 95% of them (as in
	// TestChainWithoutFramePointers); the process's start is no chain. A
	// busy machine gives the fixture less than its second of CPU: how many
	// samples it earned is checked against its CPU time below.
	var total, inC, chain int
	for _, line := range strings.Split(strings.TrimSpace(res.Stdout), "\n") {
		i := strings.LastIndexByte(line, ' ')
		n, err := strconv.Atoi(line[i+1:])
		if i < 0 || err != nil || n < 1 {
			t.Fatalf("folded line %q", line)
		}
		frames := strings.Split(line[:i], ";")
		total += n
		if frames[0] != "chain-nopie" || !slices.Contains(frames, "c") {
			continue
		}
		inC += n
		// The user frames: a sample in c taken in the kernel (an
		// interrupt: more of them under emulation) has kernel frames, _[k],
		// after c.
		user := slices.DeleteFunc(slices.Clone(frames), func(f string) bool { return strings.HasSuffix(f, "_[k]") })
		if frames[1] == "_start" && strings.HasSuffix(strings.Join(user, ";"), ";main;a;b;c") {
			chain += n
		}
	}
	if inC < 100 || float64(chain) < 0.95*float64(inC) {
		t.Errorf("%d of the %d folded samples in c are chain-nopie;_start;...;main;a;b;c (%d samples in all)\n%s", chain, inC, total, res.Stdout)
	}
	// The folded lines say nothing of how whole they are: stderr does
	// (issue 62), of every sample.
	if !strings.Contains(res.Stderr, "profile: user stacks complete: ") || !strings.Contains(res.Stderr, fmt.Sprintf(" of %d samples (", total)) {
		t.Errorf("no completeness line for the %d samples on stderr:\n%s", total, res.Stderr)
	}
	// The fixture's own samples add up to its CPU time at 199 Hz. On a
	// virtual machine whose host takes the CPU away, the CPU clock still
	// samples the stolen time, which the scheduler (and so getrusage)
	// leaves out: there the bound above is the wall time c spun, which a
	// process of one thread cannot be sampled beyond.
	var cpuUs, spunUs int
	if i := strings.Index(res.Stderr, "chain: cpu "); i < 0 {
		t.Fatalf("the fixture did not report its CPU time:\n%s", res.Stderr)
	} else if n, _ := fmt.Sscanf(res.Stderr[i:], "chain: cpu %d us, spun %d us", &cpuUs, &spunUs); n != 2 {
		t.Fatalf("the fixture's report: %q", res.Stderr[i:])
	}
	var own int
	for _, line := range strings.Split(strings.TrimSpace(res.Stdout), "\n") {
		if strings.HasPrefix(line, "chain-nopie;") {
			n, _ := strconv.Atoi(line[strings.LastIndexByte(line, ' ')+1:])
			own += n
		}
	}
	// Below, the bound is loose: a guest's timer can fire late when its
	// host is busy (qemu's TCG on a loaded machine), and the CPU clock
	// then takes one sample for all the periods that passed. A lost
	// sample or one counted twice shows all the same.
	low, high := float64(cpuUs)*199/1e6, float64(max(cpuUs, spunUs))*199/1e6
	t.Logf("chain-nopie: %d samples for %d us of CPU in %d us spinning (%.0f to %.0f expected at 199 Hz)", own, cpuUs, spunUs, low, high)
	if float64(own) < 0.75*low || float64(own) > 1.1*high+2 {
		t.Errorf("chain-nopie has %d samples for %d us of CPU in %d us, want %.0f (-25%%) to %.0f (+10%%)", own, cpuUs, spunUs, low, high)
	}
}

// TestUsageErrors: bad input is one line and exit status 2.
func TestUsageErrors(t *testing.T) {
	bin := tooltest.Tool(t, "profile")
	for _, args := range [][]string{
		{"-F", "0"},
		{"-F", "100000"},
		{"--unwind=dwarf"},
		{"--table-mib", "0"},
		{"--table-mib", "513"}, // the fences of more would not fit one array value on 5.10
		{"-p", "1", "-c", "true"},
		{"-p", "99999999"},
		{"--folded", "--json"},
		{"--folded", "-T"},
		{"--json", "-T"},
		{"--assume-missing", "foo"},
		{"--max-tree", "0"},
		{"--svg", ""},
		{"--svg-label", "ep=/alpha"}, // no --svg to draw
		{"--svg", "fg.svg", "--svg-label", "ep"},
		{"--svg", "fg.svg", "--svg-label", "=/alpha"},
		{"--off-cpu", "-I"},                  // the idle task never waits
		{"-m", "10"},                         // bounds of --off-cpu's waits, without it
		{"--off-cpu", "-m", "10", "-M", "5"}, // no wait between
		{"--off-cpu", "-M", "99999999999999999"},
	} {
		res := tooltest.Run(t, bin, args...)
		if res.Status != 2 || strings.Count(strings.TrimSpace(res.Stderr), "\n") > 1 {
			t.Errorf("profile %v: status %d, stderr %q; want 2 and one line", args, res.Status, res.Stderr)
		}
	}
}

// TestPprofAndSVGFiles profiles the non-PIE chain with --pprof and --svg:
// go tool pprof -top (where a Go toolchain is at hand) names c the top
// function, the pprof package reads the file back, and the SVG parses as
// XML and holds a frame for every function of the chain.
func TestPprofAndSVGFiles(t *testing.T) {
	stacktest.RequireUnwinder(t)
	privtest.Require(t)
	dir := stacktest.Fixtures(t)
	out := t.TempDir()
	pb, svg := filepath.Join(out, "cpu.pb.gz"), filepath.Join(out, "fg.svg")
	res := tooltest.Run(t, tooltest.Tool(t, "profile"), "-F", "199", "--pprof", pb, "--svg", svg, "-c", filepath.Join(dir, "chain-nopie")+" 1")
	if res.Status != 0 {
		t.Fatalf("status %d\n%s", res.Status, res.Stderr)
	}
	p := readPprof(t, pb)
	if len(p.Comments) != 1 || !strings.HasPrefix(p.Comments[0], "user stacks complete: ") {
		t.Errorf("the pprof's comments %q: want how whole its stacks are", p.Comments)
	}
	// c is the top function, with most of the samples taken in the chain
	// (main, a, b or c on the stack; the others are the process's start,
	// slow and long under emulation: a third of the samples in a 5.10
	// guest on a busy host).
	// inC: the user stack's leaf is c, with or without kernel frames above
	// it (an interrupt's return to c: a busy host's).
	flat := map[string]int64{}
	var total, inChain, inC int64
	for _, s := range p.Sample {
		leaf := s.Location[0].Line[0].Function.Name
		flat[leaf] += s.Value[0]
		total += s.Value[0]
		for _, l := range s.Location {
			if name := l.Line[0].Function.Name; !strings.HasSuffix(name, " [kernel]") {
				if name == "c" {
					inC += s.Value[0]
				}
				break
			}
		}
		if slices.ContainsFunc(s.Location, func(l *profile.Location) bool {
			return slices.Contains([]string{"main", "a", "b", "c"}, l.Line[0].Function.Name)
		}) {
			inChain += s.Value[0]
		}
	}
	for fn, n := range flat {
		if n > flat["c"] {
			t.Errorf("%s has more samples flat (%d) than c (%d)", fn, n, flat["c"])
		}
	}
	t.Logf("c has %d samples flat (%d at the user stack's leaf) of %d in the chain, %d in all", flat["c"], inC, inChain, total)
	if inChain < 150 || float64(inC) < 0.9*float64(inChain) {
		t.Errorf("c is the user stack's leaf in %d of the %d samples in the chain (%d samples in all): %v", inC, inChain, total, flat)
	}
	t.Run("go tool pprof", func(t *testing.T) {
		goBin, err := exec.LookPath("go")
		if err != nil {
			t.Skip("no go toolchain here: go tool pprof is checked on the host")
		}
		top, err := exec.Command(goBin, "tool", "pprof", "-top", pb).CombinedOutput()
		if err != nil {
			t.Fatalf("go tool pprof -top: %v\n%s", err, top)
		}
		// The first row under the "flat flat% sum% cum cum%" header.
		lines := strings.Split(string(top), "\n")
		for i, l := range lines {
			if strings.Contains(l, "flat%") && i+1 < len(lines) {
				if fields := strings.Fields(lines[i+1]); len(fields) < 6 || fields[5] != "c" {
					t.Errorf("go tool pprof -top's first function is not c:\n%s", top)
				}
				break
			}
		}
	})
	b, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for title := range stacktest.SVGTitles(t, b) {
		names[title[:strings.LastIndex(title, " (")]] = true
	}
	for _, fn := range []string{"chain-nopie", "_start", "__libc_start_main", "main", "a", "b", "c"} {
		if !names[fn] {
			t.Errorf("the flame graph has no frame %q", fn)
		}
	}
}

// -I counts the idle task's samples (pid 0); without it there are none.
// Two CPUs mostly idle for a second at 99 Hz give the idle task dozens.
func TestIdle(t *testing.T) {
	privtest.Require(t)
	idle := func(r report) (n int) {
		for _, st := range r.Stacks {
			if st.Pid == 0 {
				n += int(st.Count)
			}
		}
		return n
	}
	if n := idle(profileJSON(t, "-F", "99", "1", "1")); n != 0 {
		t.Errorf("without -I: %d samples of the idle task", n)
	}
	// 3 s: a guest emulated on a busy host may not idle in the first
	// second (profile's own start took it: 0 idle samples on 6.12).
	if n := idle(profileJSON(t, "-F", "99", "-I", "3", "1")); n < 10 {
		t.Errorf("with -I: %d samples of the idle task, want 10 or more", n)
	}
}

// hostileFrames writes a static ELF of the host's architecture that spins
// (jmp .) and has an .eh_frame of 64 MiB: one CIE and 3.3 million FDEs of
// a row each, far past the parse's FDE limit.
func hostileFrames(t *testing.T, path string) {
	const (
		base     = 0x400000
		codeOff  = 0x1000
		frameOff = 0x2000
		frameAt  = 0x10000000 // the section's address: FDEs point at base
		size     = 64 << 20
	)
	le := binary.LittleEndian
	var frames []byte
	frames = le.AppendUint32(frames, 20)
	// A CIE: x86-64's return address at CFA-8, CFA = rsp+8; arm64's in
	// x30 and riscv64's in ra, CFA = sp (then DW_CFA_nop).
	machine, code, cie := uint16(0x3e), []byte{0xeb, 0xfe}, []byte{16, 1, 0x1b, 0x0c, 7, 8, 0x90, 1, 0, 0} // jmp .
	switch runtime.GOARCH {
	case "arm64":
		machine, code, cie = 0xb7, []byte{0x00, 0x00, 0x00, 0x14}, []byte{30, 1, 0x1b, 0x0c, 31, 0, 0, 0, 0, 0} // b .
	case "riscv64": // the return address in ra, CFA = sp
		machine, code, cie = 0xf3, []byte{0x6f, 0x00, 0x00, 0x00}, []byte{1, 1, 0x1b, 0x0c, 2, 0, 0, 0, 0, 0} // j .
	}
	frames = append(frames, 0, 0, 0, 0, 1, 'z', 'R', 0, 1, 0x78)
	frames = append(frames, cie...)
	for pc := uint32(0); len(frames)+20 <= size; pc++ {
		at := len(frames)
		frames = le.AppendUint32(frames, 16)
		frames = le.AppendUint32(frames, uint32(at+4))
		frames = le.AppendUint32(frames, base+codeOff+pc-uint32(frameAt+at+8))
		frames = le.AppendUint32(frames, 1)
		frames = append(frames, 0, 0, 0, 0)
	}
	frames = le.AppendUint32(frames, 0)
	shstr := []byte("\x00.text\x00.eh_frame\x00.shstrtab\x00")
	shstrOff := frameOff + len(frames)
	shOff := (shstrOff + len(shstr) + 7) &^ 7
	f := make([]byte, shOff+4*64)
	copy(f, "\x7fELF\x02\x01\x01")
	le.PutUint16(f[16:], 2) // ET_EXEC
	le.PutUint16(f[18:], machine)
	le.PutUint32(f[20:], 1)
	le.PutUint64(f[24:], base+codeOff) // entry
	le.PutUint64(f[32:], 64)           // program headers
	le.PutUint64(f[40:], uint64(shOff))
	le.PutUint16(f[52:], 64)
	le.PutUint16(f[54:], 56)
	le.PutUint16(f[56:], 1)
	le.PutUint16(f[58:], 64)
	le.PutUint16(f[60:], 4)
	le.PutUint16(f[62:], 3) // .shstrtab
	ph := f[64:]
	le.PutUint32(ph, 1)     // PT_LOAD
	le.PutUint32(ph[4:], 5) // R+X
	le.PutUint64(ph[16:], base)
	le.PutUint64(ph[24:], base)
	le.PutUint64(ph[32:], codeOff+uint64(len(code)))
	le.PutUint64(ph[40:], codeOff+uint64(len(code)))
	le.PutUint64(ph[48:], 0x1000)
	copy(f[codeOff:], code)
	copy(f[frameOff:], frames)
	copy(f[shstrOff:], shstr)
	section := func(i int, name, typ uint32, flags, addr, off, size uint64) {
		sh := f[shOff+64*i:]
		le.PutUint32(sh, name)
		le.PutUint32(sh[4:], typ)
		le.PutUint64(sh[8:], flags)
		le.PutUint64(sh[16:], addr)
		le.PutUint64(sh[24:], off)
		le.PutUint64(sh[32:], size)
		le.PutUint64(sh[48:], 1)
	}
	section(1, 1, 1, 6, base+codeOff, codeOff, uint64(len(code))) // .text
	section(2, 7, 1, 2, frameAt, frameOff, uint64(len(frames)))   // .eh_frame
	section(3, 17, 3, 0, 0, uint64(shstrOff), uint64(len(shstr))) // .shstrtab
	if err := os.WriteFile(path, f, 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestHostileFrames profiles a process whose .eh_frame is 64 MiB (any
// user can make one) beside the chain fixture: its table is refused with
// one line naming the limit, profile's memory stays within its bound, and
// the chain's samples are at least 95% whole (90% in the emulated
// guests, see below), or as whole as beside a spinner of no such file on
// the same machine, 5 points given.
//
// In the 1-CPU guests under emulation the parse takes a minute, and every
// sample of the spinner in that time was deferred to user space (10 KiB
// each), faster than a starved profile read them: the ring dropped the
// chain's deferrals and exec notice with them (73% to 92% whole in the
// 7.2 guest). The notices have a ring of their own now, and one file's
// deferrals stop at maxDeferredPerFile. Then (0% to 87%): the readers of
// the rings waited on each report's pass over kallsyms (10 to 20 s there)
// and on libc's parse (2 s), and the hold cut libc's samples short while
// it was read; a record took 10 KiB whatever its copy. Since those were
// fixed: 100% in each of 5 runs in the 7.2 guest.
func TestHostileFrames(t *testing.T) {
	stacktest.RequireUnwinder(t)
	privtest.Require(t)
	dir := stacktest.Fixtures(t)
	spin := filepath.Join(t.TempDir(), "bigframes")
	hostileFrames(t, spin)
	// A spinner with a table of a few rows: the same load, no hostile file.
	calm := filepath.Join(t.TempDir(), "calmframes")
	if err := os.Symlink(filepath.Join(dir, "chain-pie"), calm); err != nil {
		t.Fatal(err)
	}
	hostile := spinBeside(t, dir, spin, "bigframes")
	want := fmt.Sprintf("bigframes: more than %d FDEs", unwind.MaxFDEs)
	if len(hostile.refused) != 1 || hostile.refused[0] != want {
		t.Errorf("refused %q, want [%q]", hostile.refused, want)
	}
	if hostile.spun < 100 {
		t.Errorf("%d samples of bigframes spinning, want 100 or more", hostile.spun)
	}
	// At least 95%; in the matrix's 1-CPU emulated guests (TRACEKIT_BIN),
	// where profile is starved beside the parse and two spinners, 90%.
	// Under that, the same beside a calm spinner (measured only then: in
	// the guests each run takes a minute and more).
	floor, base := 0.95, beside{share: 1}
	if os.Getenv("TRACEKIT_BIN") != "" {
		floor = 0.90
	}
	if hostile.share < floor {
		base = spinBeside(t, dir, calm+" 600 user", "calmframes")
		if len(base.refused) != 0 {
			t.Errorf("beside a spinner of a small table: refused %q, want none", base.refused)
		}
		floor = min(floor, base.share-0.05)
	}
	// 50 samples of the chain at least: 110 to 198 in the guests three at
	// a time (two spinners and a parse share one emulated CPU).
	if hostile.n < 50 || hostile.share < floor {
		t.Errorf("%.1f%% of %d samples of the chain have the whole chain beside bigframes, %.1f%% beside a calm spinner; want at least %.1f%% of 50 or more\n%s", 100*hostile.share, hostile.n, 100*base.share, 100*floor, hostile.stderr)
		// The stacks that count against the share (in c, not whole)
		// first: CI keeps only the end of the log.
		for _, inC := range []bool{false, true} {
			for _, st := range hostile.r.Stacks {
				whole := (st.End == "complete" || st.End == "frame pointers") && hasChain(st.User)
				if st.Comm == "chain-pie" && !whole && slices.Contains(st.User, "c") == inC {
					t.Logf("  in c %v: %d (%s) %q", inC, st.Count, st.End, st.User)
				}
			}
		}
	}
	// The parse's bound, and 64 MiB for the rest of profile (it needs 25
	// to 40 here), well under the 64 MiB the section would take alone.
	if limit := int64(unwind.ParseMemory+64<<20) >> 10; hostile.hwm == 0 || hostile.hwm > limit {
		t.Errorf("profile's VmHWM reached %d KiB, want 1 to %d", hostile.hwm, limit)
	}
}

// beside is what spinBeside measured.
type beside struct {
	r       report
	refused []string
	hwm     int64   // profile's peak resident memory, KiB
	spun    int     // samples of the spinner
	share   float64 // of the chain's samples in c, the whole ones
	n       int     // the chain's samples in c
	unseen  uint64  // the command's forks the kernel skipped following
	// notDeferred: samples the full deferred ring turned away; stderr:
	// profile's.
	notDeferred uint64
	stderr      string
}

// spinBeside profiles spin (a command line, its process named comm) and
// beside it the chain fixture's 4 s of spinning. Reports come every 0.5 s
// until the chain has 100 samples in c and (a spinner of bigframes) one
// names the refused file; then SIGINT ends the run (the guests' busybox
// has no nice to lower the spinners). A run in which the kernel skipped
// following one of the command's forks (7.x, see
// run.Session.FollowProcessTree) lost a spinner's samples: it is run
// again, up to three times.
func spinBeside(t *testing.T, dir, spin, comm string) beside {
	t.Helper()
	for try := 1; ; try++ {
		b := spinBesideOnce(t, dir, spin, comm)
		if b.unseen == 0 || try == 3 {
			return b
		}
		t.Logf("beside %s: the kernel skipped following %d of the command's forks: run again", comm, b.unseen)
	}
}

func spinBesideOnce(t *testing.T, dir, spin, comm string) beside {
	t.Helper()
	cmd := spin + " & " + filepath.Join(dir, "chain-pie") + " 4 user; wait"
	tool := exec.Command(tooltest.Tool(t, "profile"), "--json", "-F", "199", "-c", cmd, "0.5")
	var stderr strings.Builder
	tool.Stderr = &stderr
	stdout, err := tool.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := tool.Start(); err != nil {
		t.Fatal(err)
	}
	defer tool.Process.Kill()
	type line struct {
		report
		Refused     []string `json:"refused"`
		NotDeferred uint64   `json:"not_deferred"`
	}
	lines := make(chan line)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			var l line
			if json.Unmarshal(sc.Bytes(), &l) == nil {
				lines <- l
			}
		}
	}()
	// Its peak resident memory (VmHWM, which only grows), read as it runs.
	var b beside
	// In the 1-CPU guests the 64 MiB parse takes 60 to 100 s beside the
	// two spinners.
	deadline := time.After(240 * time.Second)
	signalled := false
	for open := true; open; {
		select {
		case l, ok := <-lines:
			if !ok {
				open = false
				break
			}
			b.r.Stacks = append(b.r.Stacks, l.Stacks...)
			if len(l.Refused) > 0 {
				b.refused = l.Refused
			}
			b.notDeferred = l.NotDeferred
			done := len(b.refused) > 0 || comm != "bigframes"
			if _, n := chainShare(b.r, "chain-pie", true); !signalled && done && n >= 100 {
				signalled = true
				tool.Process.Signal(syscall.SIGINT)
			}
		case <-time.After(20 * time.Millisecond):
			if kib, ok := procStatus(tool.Process.Pid, "VmHWM"); ok {
				b.hwm = kib
			}
		case <-deadline:
			_, n := chainShare(b.r, "chain-pie", true)
			comms := map[string]uint64{}
			for _, st := range b.r.Stacks {
				comms[st.Comm] += st.Count
			}
			t.Fatalf("%s: no refusal and 100 samples of the chain within 240 s: refused %q, %d samples in c; samples by comm %v\n%s", comm, b.refused, n, comms, stderr.String())
		}
	}
	if err := tool.Wait(); err != nil {
		t.Fatalf("%s: profile: %v\n%s", comm, err, stderr.String())
	}
	b.share, b.n = chainShare(b.r, "chain-pie", true)
	b.unseen = tooltest.ForksNotSeen("profile", stderr.String())
	b.stderr = stderr.String()
	for _, st := range b.r.Stacks {
		if st.Comm == comm {
			b.spun += int(st.Count)
		}
	}
	t.Logf("beside %s: VmHWM %d KiB; refused %q; %d samples of %s; chain: %d samples, %.1f%% whole; %d samples not deferred (a full ring)", comm, b.hwm, b.refused, b.spun, comm, b.n, 100*b.share, b.notDeferred)
	return b
}

// procStatus reads a "kB" line of /proc/PID/status.
func procStatus(pid int, name string) (int64, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// TestOutputOnFullDisk writes --svg and --pprof to a full file system: one
// line that names the file once, exit 1, and no empty or cut file left.
// (The path was said twice, "write F: write F: no space left on device",
// and an empty file stayed.)
func TestOutputOnFullDisk(t *testing.T) {
	privtest.Require(t)
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=4k"); err != nil {
		t.Fatalf("mount a tmpfs of 4 KiB: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, 0) })
	// Fill its one page.
	if err := os.WriteFile(filepath.Join(dir, "filler"), make([]byte, 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, flag := range []string{"--svg", "--pprof"} {
		out := filepath.Join(dir, "out")
		res := tooltest.Run(t, tooltest.Tool(t, "profile"), flag, out, "-c", "sleep 0.2")
		want := fmt.Sprintf("profile: write %s: no space left on device\n", out)
		if res.Status != 1 || !strings.HasSuffix(res.Stderr, want) || strings.Count(res.Stderr, out) != 1 {
			t.Errorf("%s on a full disk: exit %d, stderr %q; want 1 and a last line %q", flag, res.Status, res.Stderr, want)
		}
		if _, err := os.Stat(out); !os.IsNotExist(err) {
			t.Errorf("%s on a full disk left %s behind (%v)", flag, out, err)
		}
		os.Remove(out)
	}
}

// TestUnreadableProcessSaid: with CAP_BPF and CAP_PERFMON (and
// CAP_DAC_READ_SEARCH for tracefs), profile samples a root process whose
// files it may not open (the ptrace check): the report says so, with the
// capability that reads them, instead of an empty table and no word. The
// binary before said nothing.
func TestUnreadableProcessSaid(t *testing.T) {
	privtest.Require(t)
	paranoid, _ := os.ReadFile("/proc/sys/kernel/perf_event_paranoid")
	if level, _ := strconv.Atoi(strings.TrimSpace(string(paranoid))); level > 2 {
		t.Skipf("perf_event_paranoid is %d: perf events are root's (writesize's TestCapBPFWithoutTracefsAccess checks the message)", level)
	}
	busy := exec.Command("sh", "-c", "while :; do :; done")
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { busy.Process.Kill(); busy.Wait() }()
	caps := []uintptr{tooltest.CapBPF, tooltest.CapPerfmon, tooltest.CapDacReadSearch}
	r := tooltest.RunAs(t, caps, tooltest.Tool(t, "profile"), "-p", strconv.Itoa(busy.Process.Pid), "1", "1")
	if r.Status != 0 || !strings.Contains(r.Stdout, "  1 process unreadable: another user's, or holding capabilities profile lacks (CAP_SYS_PTRACE, or root, reads them)") {
		t.Errorf("exit %d, stdout %q, stderr %q; want the unreadable process said", r.Status, r.Stdout, r.Stderr)
	}
	r = tooltest.RunAs(t, append(caps, tooltest.CapSysPtrace), tooltest.Tool(t, "profile"), "-p", strconv.Itoa(busy.Process.Pid), "1", "1")
	if r.Status != 0 || strings.Contains(r.Stdout, "unreadable") || !strings.Contains(r.Stdout, "unwind tables: ") || strings.Contains(r.Stdout, "unwind tables: 0 files") {
		t.Errorf("with CAP_SYS_PTRACE: exit %d, stdout %q, stderr %q; want its files' tables read", r.Status, r.Stdout, r.Stderr)
	}
}

// --label reads each sampled thread's own values: the fixture's main
// thread in two phases, its second thread all along, each with its own
// thread-locals (an integer, a char *, a char array) and a global. Every
// sample carries one thread's values, never a mix of two threads'; each
// phase gets its share of the main thread's samples; the pprof file
// carries them as sample labels.
func TestLabelsPerThread(t *testing.T) {
	stacktest.RequireThreadPointer(t)
	privtest.Require(t)
	dir := stacktest.Fixtures(t)
	// glibc's dynamic executable, musl's static one.
	for _, exe := range []string{"tls", "musl/tls-static"} {
		t.Run(exe, func(t *testing.T) { labelsPerThread(t, filepath.Join(dir, exe)) })
	}
}

func labelsPerThread(t *testing.T, exe string) {
	stacktest.HaveFixture(t, exe)
	pb := filepath.Join(t.TempDir(), "cpu.pb.gz")
	r := profileJSON(t, "-F", "199", "--pprof", pb, "-c", exe+" 0.5 1.5", // warm-up: inPhases
		"--label", "req=tls:tk_req:int", "--label", "ep=tls:tk_ep:str", "--label", "tenant=tls:tk_tenant:chars", "--label", "phase=var:tk_phase:int")
	type values struct{ req, ep, tenant string }
	threads := map[values]string{
		{"101", "/alpha", "t-a"}:     "alpha",
		{"202", "/beta", "t-b"}:      "beta",
		{"999", "/other", "t-other"}: "other",
		{"1", "<nil>", "t-w"}:        "warmup", // a NULL char *: unset
	}
	by := map[string]int{}
	total := 0
	rows := map[string]bool{}
	for _, st := range r.Stacks {
		// One row per stack and labels: a stack sampled under the same
		// values is counted once, never split (nor merged across values).
		row := fmt.Sprint(st.Pid, st.Comm, st.User, st.Kernel, st.End, st.Labels)
		if rows[row] {
			t.Errorf("two rows of one stack and labels: %s", row)
		}
		rows[row] = true
		if st.Comm != filepath.Base(exe) {
			continue
		}
		v := values{fmt.Sprint(st.Labels["req"]), fmt.Sprint(st.Labels["ep"]), fmt.Sprint(st.Labels["tenant"])}
		name, ok := threads[v]
		if !ok {
			// A thread's first instants, before it set its values (its
			// thread-locals are zero), or the few instructions that switch
			// the main thread's phase.
			name = "between"
		}
		// The global is 0 until main sets it to 1 (the loader's time, and
		// the second thread's first instants), then 2 before the beta
		// values. A process's first samples, before profile placed its
		// labels, have none.
		ph, ok := st.Labels["phase"]
		want := map[string][]any{"warmup": {0.0}, "alpha": {1.0, 2.0}, "beta": {2.0}, "other": {0.0, 1.0, 2.0}, "between": {0.0, 1.0, 2.0}}[name]
		if ok && !slices.Contains(want, ph) {
			t.Errorf("phase %v with %v (%s): want one of %v", ph, v, name, want)
		}
		if inPhases(st) {
			by[name] += int(st.Count)
			total += int(st.Count)
		}
	}
	if total < 100 {
		// The arm64 guest's CI once had none (map[]), and 5 runs by hand
		// had 163 to 190: say whose samples there were.
		logStacks(t, r.Stacks)
	}
	checkPhases(t, by, total)

	p := readPprof(t, pb)
	tagged := map[string]int64{}
	for _, s := range p.Sample {
		if eps := s.Label["ep"]; len(eps) == 1 && len(s.NumLabel["req"]) == 1 {
			tagged[fmt.Sprintf("%s %d", eps[0], s.NumLabel["req"][0])] += s.Value[0]
		}
	}
	if tagged["/alpha 101"] == 0 || tagged["/beta 202"] == 0 || tagged["/other 999"] == 0 {
		t.Errorf("pprof samples by ep and req: %v; want /alpha 101, /beta 202 and /other 999", tagged)
	}
}

// checkPhases checks the tls fixture's samples by thread and phase (of
// total): each phase a quarter of the main thread's at least, the second
// thread a fifth, and an eighth at most "between" (not all of a thread's
// values: the instants that switch them).
// inPhases tells tls's samples after its warm-up by their stacks: the
// main thread's phases spin in main_phase, the second thread in other.
// The loader's and the warm-up's are not counted: in qemu's guests profile
// placed the labels over a second after the command's start (the tables
// of its libraries read first), samples with no labels at all (69 of 224
// in the 7.2 guest of the CI of b2a8e81, alpha's share cut to a tenth).
// logStacks logs each process's samples and its most sampled stacks.
func logStacks(t *testing.T, sts []stacks.JSONStack) {
	t.Helper()
	byComm := map[string]uint64{}
	for _, st := range sts {
		byComm[fmt.Sprintf("%s %d", st.Comm, st.Pid)] += st.Count
	}
	t.Logf("samples by process: %v", byComm)
	top := slices.Clone(sts)
	slices.SortFunc(top, func(a, b stacks.JSONStack) int { return int(b.Count) - int(a.Count) })
	for _, st := range top[:min(len(top), 8)] {
		t.Logf("  %d %s %d (%s) %q", st.Count, st.Comm, st.Pid, st.End, st.User)
	}
}

func inPhases(st stacks.JSONStack) bool {
	return slices.Contains(st.User, "main_phase") || slices.Contains(st.User, "other")
}

func checkPhases(t *testing.T, by map[string]int, total int) {
	t.Helper()
	t.Logf("%d samples of the fixture: %v", total, by)
	if total < 100 {
		t.Fatalf("%d samples of the fixture: want 2 threads' 199 a second for a second", total)
	}
	if main := by["alpha"] + by["beta"]; by["alpha"] < main/4 || by["beta"] < main/4 || by["other"] < total/5 {
		t.Errorf("samples per thread and phase %v of %d: want each phase a quarter of the main thread's at least, and the other thread a fifth", by, total)
	}
	// Samples between a thread's values (a phase switching, a thread
	// before it set them): an instant on the host; under qemu's emulation
	// on a busy host they were 19% (arm64; the commit before these tests
	// changed too). Another thread's value is never allowed (the callers).
	most := total / 8
	if os.Getenv("TRACEKIT_BIN") != "" {
		most = total / 4
	}
	if by["between"] > most {
		t.Errorf("%d of %d samples carry not all of their thread's values, want at most %d", by["between"], total, most)
	}
}

// The thread-locals of shared libraries, by each access model, on glibc
// and on musl: general-dynamic (tk_gd_req) and local-dynamic (the static
// tk_gd_local) through the thread's DTV, initial-exec (tk_ie_*), TLSDESC
// (tk_desc_*), and a library opened by dlopen (tk_dl_req) whose
// thread-locals the second thread never touches. Every sample carries its
// own thread's values, never another thread's; the untouched ones are
// unset (glibc: not allocated) or zero (musl allocates every thread's
// block at dlopen).
func TestLabelsLibraries(t *testing.T) {
	stacktest.RequireThreadPointer(t)
	privtest.Require(t)
	dir := stacktest.Fixtures(t)
	// Each label's value is req + its offset (tls.c).
	offsets := map[string]float64{"gd": 0, "gdl": 1, "ie": 10, "iel": 11, "desc": 20, "descl": 21, "dl": 30}
	args := []string{"-F", "199", "--label", "req=tls:tk_req:int"}
	for _, name := range slices.Sorted(maps.Keys(offsets)) {
		sym := "tk_" + name + "_req"
		if lib, ok := strings.CutSuffix(name, "l"); ok && name != "dl" {
			sym = "tk_" + lib + "_local"
		}
		if name == "gd" {
			sym = "libtkgd.so:" + sym // a FILE by its base name among the mapped ones
		}
		args = append(args, "--label", name+"=tls:"+sym+":int")
	}
	threadOf := func(req float64) string {
		return map[float64]string{1: "main", 101: "main", 202: "main", 999: "other"}[req]
	}
	for _, exe := range []string{"tls", "musl/tls"} {
		t.Run(exe, func(t *testing.T) {
			stacktest.HaveFixture(t, filepath.Join(dir, exe))
			// A warm-up of 1.5 s: profile places the libraries' labels as
			// the loader maps them, which took over a second in qemu's
			// guests on a busy host (inPhases).
			r := profileJSON(t, append(args, "-c", filepath.Join(dir, exe)+" 0.5 1.5")...)
			by := map[string]int{}
			total := 0
			for _, st := range r.Stacks {
				if st.Comm != filepath.Base(exe) {
					continue
				}
				req, _ := st.Labels["req"].(float64)
				whole := threadOf(req) != ""
				for name, off := range offsets {
					v, ok := st.Labels[name]
					if name == "dl" && threadOf(req) == "other" {
						if ok && v != 0.0 {
							t.Errorf("dl=%v in the thread that never touched it (req=%v): want unset or 0", v, req)
						}
						continue
					}
					if ok && v == req+off {
						continue
					}
					whole = false
					// Not yet set (zero), or the main thread's other phase
					// in the instants that switch them; never another
					// thread's.
					if n, _ := v.(float64); ok && n != 0 && threadOf(n-off) != threadOf(req) {
						t.Errorf("%s=%v with req=%v: another thread's value (%v)", name, v, req, st.Labels)
					}
				}
				// The warm-up's samples are checked, not counted: before
				// the second thread, profile places the libraries' labels
				// as the loader maps and fills them in.
				if !inPhases(st) {
					continue
				}
				name := map[float64]string{101: "alpha", 202: "beta", 999: "other"}[req]
				if !whole {
					name = "between"
				}
				by[name] += int(st.Count)
				total += int(st.Count)
			}
			checkPhases(t, by, total)
		})
	}
}

// The seed's strobe layouts: an int set by its header's len (the second
// thread leaves it 0: unset though its value is written), a string (the
// second thread's 100 characters kept to 63, the warm-up's NULL unset), a
// map's id, tag (NULL: none) and first three entries, no more than its cnt
// (the second thread's 1), as labels NAME.id, NAME.tag, NAME.KEY.
func TestLabelsStrobe(t *testing.T) {
	stacktest.RequireThreadPointer(t)
	privtest.Require(t)
	dir := stacktest.Fixtures(t)
	// The map's id is the thread's req. No more labels: on kernels of
	// 512-byte keys these leave room for 8 user frames.
	r := profileJSON(t, "-F", "199", "-c", filepath.Join(dir, "tls")+" 0.5 1.5", "--label", "si=tls:tk_strobe_int:strobe-int", "--label", "ss=tls:tk_strobe_str:strobe-str", "--label", "m=tls:tk_strobe_map:strobe-map")
	phase := func(req float64, ep, tenant string) map[string]any {
		return map[string]any{"si": req, "ss": ep, "m.id": req, "m.tag": "phase", "m.ep": ep, "m.tenant": tenant, "m.k3": "v3"}
	}
	want := map[float64]map[string]any{
		1:   {"si": 1.0, "m.id": 1.0, "m.tag": "warmup", "m.ep": "", "m.tenant": "t-w", "m.k3": "v3"},
		101: phase(101, "/alpha", "t-a"),
		202: phase(202, "/beta", "t-b"),
		999: {"ss": strings.Repeat("x", 63), "m.id": 999.0, "m.ep": "/other"},
	}
	by := map[string]int{}
	total := 0
	for _, st := range r.Stacks {
		if st.Comm != "tls" {
			continue
		}
		req, _ := st.Labels["m.id"].(float64)
		if _, ok := st.Labels["m.k4"]; ok {
			t.Errorf("%v: the map's fourth entry, beyond the three kept", st.Labels)
		}
		if req == 999 {
			for _, name := range []string{"si", "m.tag", "m.tenant", "m.k3"} {
				if v, ok := st.Labels[name]; ok {
					t.Errorf("%s=%v in the second thread (%v): want unset", name, v, st.Labels)
				}
			}
		}
		if !inPhases(st) {
			continue // the loader's, the warm-up's (labels placed meanwhile)
		}
		name := fmt.Sprint(req)
		if !reflect.DeepEqual(st.Labels, want[req]) || req == 1 {
			name = "between"
		}
		by[name] += int(st.Count)
		total += int(st.Count)
	}
	t.Logf("%d samples of the fixture: %v", total, by)
	if total < 100 {
		// The arm64 guest of the CI of fc17d75 counted none (as
		// TestLabelsPerThread once there): say whose samples there were.
		comms := map[string]uint64{}
		for _, st := range r.Stacks {
			comms[fmt.Sprintf("%s/%d", st.Comm, st.Pid)] += st.Count
		}
		t.Fatalf("%d samples of the fixture: want 2 threads' 199 a second for a second; samples by comm/pid: %v", total, comms)
	}
	if by["101"] < total/8 || by["202"] < total/8 || by["999"] < total/5 || by["between"] > total/8 {
		t.Errorf("samples by values %v of %d: want each phase an eighth at least, the second thread a fifth, and an eighth at most between", by, total)
	}
}

// A label's symbol that is not of its kind, or not in the file named, is
// a usage error before anything is attached.
func TestLabelUsageErrors(t *testing.T) {
	dir := stacktest.Fixtures(t)
	exe := filepath.Join(dir, "tls")
	for _, c := range []struct{ label, says string }{
		{"x=tls:" + exe + ":tk_phase:int", "tk_phase is not a thread-local (use var:)"},
		{"x=var:" + exe + ":tk_req:int", "tk_req is a thread-local (use tls:)"},
		{"x=tls:" + exe + ":nope:int", "defines no such symbol"},
		{"x=tls:tk_req:float", `unknown TYPE "float"`},
		{"x=tk_req", "want a SOURCE of"},
		{"1x=tls:tk_req:int", "a name is a letter"},
	} {
		r := tooltest.Run(t, tooltest.Tool(t, "profile"), "--label", c.label, "-c", "true")
		if r.Status != 2 || !strings.Contains(r.Stderr, c.says) {
			t.Errorf("--label %s: exit %d, stderr %q; want 2 and %q", c.label, r.Status, r.Stderr, c.says)
		}
	}

	// With no FILE, the symbol is looked up in the files known before the
	// run: the -c command's executable, the -p process's mapped files.
	for _, c := range []struct{ label, says string }{
		{"x=tls:tk_phase:int", "tk_phase is not a thread-local (use var:)"},
		{"x=var:tk_req:int", "tk_req is a thread-local (use tls:)"},
	} {
		for _, line := range []string{exe + " 0.1", "TK_X=1 exec " + exe + " 0.1"} {
			r := tooltest.Run(t, tooltest.Tool(t, "profile"), "--label", c.label, "-c", line)
			if r.Status != 2 || !strings.Contains(r.Stderr, c.says) || !strings.Contains(r.Stderr, exe) {
				t.Errorf("--label %s -c %q: exit %d, stderr %q; want 2 and %q", c.label, line, r.Status, r.Stderr, c.says)
			}
		}
	}
	cmd := exec.Command(exe, "5")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		maps, _ := os.ReadFile(fmt.Sprintf("/proc/%d/maps", cmd.Process.Pid))
		if strings.Contains(string(maps), "libtkgd.so") || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	pid := strconv.Itoa(cmd.Process.Pid)
	for _, c := range []struct{ label, says string }{
		{"x=var:tk_gd_req:int", "libtkgd.so: tk_gd_req is a thread-local (use tls:)"},
		{"x=var:libtkgd.so:tk_gd_req:int", "tk_gd_req is a thread-local (use tls:)"},
		{"x=tls:tk_phase:int", "tk_phase is not a thread-local (use var:)"},
	} {
		r := tooltest.Run(t, tooltest.Tool(t, "profile"), "--label", c.label, "-p", pid, "0.1", "1")
		if r.Status != 2 || !strings.Contains(r.Stderr, c.says) {
			t.Errorf("--label %s -p: exit %d, stderr %q; want 2 and %q", c.label, r.Status, r.Stderr, c.says)
		}
	}
}

// TestLabelsForgottenAtExit: when a sampled process's last thread exits,
// the exit program forgets it (its entries in the labels and seen maps
// go), so that a process that gets its pid again is announced and placed
// anew instead of read at the first one's places.
func TestLabelsForgottenAtExit(t *testing.T) {
	stacktest.RequireThreadPointer(t)
	privtest.Require(t)
	exe := filepath.Join(stacktest.Fixtures(t), "tls")
	before := lastMapID()
	// tls runs 2.6 s (a warm-up of 2): long enough for profile to place
	// its labels in qemu's guests on a slow host, where 0.75 s was not.
	tool := exec.Command(tooltest.Tool(t, "profile"), "-F", "199", "--label", "req=tls:tk_req:int", "-c", exe+" 0.3 2; sleep 3")
	if err := tool.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { tool.Process.Kill(); tool.Wait() }()
	labels, seen := newMap(t, before, "profile_labels"), newMap(t, before, "profile_seen")
	defer labels.Close()
	defer seen.Close()
	keys := func(m *ebpf.Map) []uint32 {
		var out []uint32
		var k uint32
		var v []byte
		for it := m.Iterate(); it.Next(&k, &v); {
			out = append(out, k)
		}
		return out
	}
	var pid uint32
	for deadline := time.Now().Add(10 * time.Second); pid == 0; time.Sleep(5 * time.Millisecond) {
		if ks := keys(labels); len(ks) > 0 {
			pid = ks[0]
		} else if time.Now().After(deadline) {
			t.Fatal("no process got an entry in the labels map while tls ran")
		}
	}
	var v uint64
	if err := seen.Lookup(pid, &v); err != nil {
		t.Fatalf("tls (%d) has labels and is not seen: %v", pid, err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		left, err := keys(labels), seen.Lookup(pid, &v)
		if len(left) == 0 && err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("tls (%d) exited, and the labels map still holds %v, seen %v", pid, left, err == nil)
		}
	}
	tool.Process.Signal(syscall.SIGINT)
	if err := tool.Wait(); err != nil {
		t.Errorf("profile: %v", err)
	}
}

// lastMapID is the newest BPF map's id: the maps a run creates have
// greater ones.
func lastMapID() ebpf.MapID {
	var last ebpf.MapID
	for id, err := ebpf.MapGetNextID(0); err == nil; id, err = ebpf.MapGetNextID(id) {
		last = id
	}
	return last
}

// newMap waits for the map named name with an id greater than after.
func newMap(t *testing.T, after ebpf.MapID, name string) *ebpf.Map {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for id, err := ebpf.MapGetNextID(after); err == nil; id, err = ebpf.MapGetNextID(id) {
			m, err := ebpf.NewMapFromID(id)
			if err != nil {
				continue
			}
			if info, err := m.Info(); err == nil && info.Name == name {
				return m
			}
			m.Close()
		}
	}
	t.Fatalf("no map %s appeared", name)
	return nil
}

// readPprof reads a pprof file back with google/pprof's package.
func readPprof(t *testing.T, path string) *profile.Profile {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		t.Fatalf("the pprof package cannot read %s: %v", path, err)
	}
	return p
}

// The context processes publish for profilers, read with no flag: the
// OpenTelemetry thread context (trace and span ids, attributes named by
// the process context) and custom labels, ABI v1 (a TLSDESC library) and
// v0 (the executable). Every sample carries its own thread's context as
// it was: never another thread's, never a record in the middle of an
// update (valid 0), never a label set's label with no key or a key's
// second value. --no-context reads none.
func TestContext(t *testing.T) {
	stacktest.RequireThreadPointer(t)
	privtest.Require(t)
	dir := stacktest.Fixtures(t)
	ids := func(trace, span string) map[string]any {
		return map[string]any{"trace_id": strings.Repeat(trace, 16), "span_id": strings.Repeat(span, 8)}
	}
	with := func(m map[string]any, kv ...string) map[string]any {
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	tenant := func(v string) map[string]any { return map[string]any{"tenant": v} }
	for _, c := range []struct {
		fixture string
		want    map[string]map[string]any // phase: its labels
		share   map[string]int            // phase: the least share of the fixture's samples, 1/n
	}{
		{"otelctx", map[string]map[string]any{
			"alpha":  with(ids("11", "21"), "http.method", "GET", "http.route", "/alpha"),
			"beta":   with(ids("11", "22"), "http.method", "POST", "http.route", "/beta", "attr.7", "x"),
			"thread": with(ids("99", "98"), "http.route", "/thread"),
		}, map[string]int{"alpha": 10, "beta": 10, "thread": 5, "none": 20}},
		{"customlabels", map[string]map[string]any{
			"acme":   {"tenant": "acme", "user": "u1"},
			"globex": tenant("globex"),
			"thread": tenant("thread"),
		}, map[string]int{"acme": 8, "globex": 8, "thread": 5}},
		{"customlabels-v0", map[string]map[string]any{
			"acme":   {"tenant": "acme", "user": "u1"},
			"globex": tenant("globex"),
			"thread": tenant("thread"),
		}, map[string]int{"acme": 8, "globex": 8, "thread": 5}},
	} {
		t.Run(c.fixture, func(t *testing.T) {
			args := []string{"-F", "199", "-c", filepath.Join(dir, c.fixture) + " 0.5"}
			svg := filepath.Join(t.TempDir(), "beta.svg")
			if c.fixture == "otelctx" {
				args = append(args, "--svg", svg, "--svg-label", "http.route=/beta")
			}
			r := profileJSON(t, args...)
			if c.fixture == "otelctx" {
				checkLabelSVG(t, svg, r, "http.route", "/beta", "/alpha")
			}
			by := map[string]int{}
			total := 0
			for _, st := range r.Stacks {
				if st.Comm != c.fixture[:min(len(c.fixture), 15)] {
					continue
				}
				total += int(st.Count)
				phase := "other"
				if len(st.Labels) == 0 {
					phase = "none"
				}
				for name, want := range c.want {
					if reflect.DeepEqual(st.Labels, want) {
						phase = name
					}
				}
				if phase == "other" {
					t.Errorf("%d samples with labels %v: want one phase's %v, or none", st.Count, st.Labels, c.want)
				}
				by[phase] += int(st.Count)
			}
			t.Logf("%d samples of the fixture: %v", total, by)
			if total < 100 {
				t.Fatalf("%d samples of the fixture: want 2 threads' 199 a second for a second", total)
			}
			for phase, n := range c.share {
				if by[phase] < total/n {
					t.Errorf("%d of %d samples in phase %s: want 1/%d at least", by[phase], total, phase, n)
				}
			}
		})
	}
	t.Run("no-context", func(t *testing.T) {
		r := profileJSON(t, "-F", "199", "--no-context", "-c", filepath.Join(dir, "otelctx")+" 0.2")
		n := 0
		for _, st := range r.Stacks {
			if st.Comm == "otelctx" {
				n += int(st.Count)
				if len(st.Labels) != 0 {
					t.Errorf("--no-context: a stack with labels %v", st.Labels)
				}
			}
		}
		if n == 0 {
			t.Error("--no-context: no samples of the fixture")
		}
	})
}

// checkLabelSVG checks a --svg drawn with --svg-label name=value: its root
// holds exactly the samples of the report's stacks with that value, under
// a frame "[name=value]", and no frame of another value.
func checkLabelSVG(t *testing.T, svg string, r report, name, value, other string) {
	t.Helper()
	b, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	for _, st := range r.Stacks {
		if st.Labels[name] == value {
			want += int(st.Count)
		}
	}
	titles := stacktest.SVGTitles(t, b)
	root := -1
	for title := range titles {
		if n, ok := strings.CutPrefix(title, "all ("); ok {
			fmt.Sscanf(n, "%d samples", &root)
		}
		if strings.HasPrefix(title, "["+name+"="+other+"]") {
			t.Errorf("--svg-label %s=%s: the graph has a frame %q", name, value, title)
		}
	}
	if root != want || want == 0 {
		t.Errorf("--svg-label %s=%s: the graph holds %d samples, the report %d with that label", name, value, root, want)
	}
	label := fmt.Sprintf("[%s=%s] (%d samples, 100.00%%)", name, value, want)
	if !titles[label] {
		t.Errorf("--svg-label %s=%s: no frame titled %q", name, value, label)
	}
}

// C++ overloads and a template instance are frames of their own, named
// with their parameters as perf names them (--no-params: as BCC does,
// one frame f); the pprof file has them as two functions, and mappings:
// go tool pprof -raw lists the fixture's file with its build id.
func TestOverloads(t *testing.T) {
	stacktest.RequireUnwinder(t)
	privtest.Require(t)
	fx := filepath.Join(stacktest.Fixtures(t), "overload")
	full := []string{"f(int)", "f(double)", "void tmpl<int>(int)"}
	pb := filepath.Join(t.TempDir(), "cpu.pb.gz")
	for _, c := range []struct {
		args  []string
		names []string
	}{
		{[]string{"--pprof", pb}, full},
		{[]string{"--no-params"}, []string{"f", "f", "tmpl"}},
	} {
		r := profileJSON(t, append(c.args, "-F", "199", "-c", fx+" 400")...)
		leaves := map[string]uint64{}
		var total uint64
		for _, st := range r.Stacks {
			if st.Comm != "overload" {
				continue
			}
			// riscv64's vdso has no unwind rows: a sample in its
			// clock_gettime (spin_cpu's, slow under TCG: up to half the
			// samples in the riscv64 guest) ends there, under no overload.
			if len(st.User) > 0 && strings.HasPrefix(st.User[0], "__vdso_") && st.End == "[unwind error: no unwind row]" && runtime.GOARCH == "riscv64" {
				continue
			}
			total += st.Count
			for _, f := range st.User {
				if slices.Contains(c.names, f) {
					leaves[f] += st.Count
					break
				}
			}
		}
		t.Logf("%v: %v of %d samples", c.args, leaves, total)
		for _, name := range c.names {
			// Each spins a third of the run: well over a sixth of the
			// samples whatever the emulation's start-up costs.
			if want := total / 6; leaves[name] < want || total < 60 {
				t.Errorf("%v: %d samples under %s of %d, want at least %d", c.args, leaves[name], name, total, want)
			}
		}
		for _, other := range full {
			if !slices.Contains(c.names, other) && leaves[other] != 0 {
				t.Errorf("%v: %s named", c.args, other)
			}
		}
	}
	p := readPprof(t, pb)
	ids := map[string]uint64{}
	for _, f := range p.Function {
		if slices.Contains(full, f.Name) {
			ids[f.Name] = f.ID
		}
	}
	if len(ids) != 3 || ids["f(int)"] == ids["f(double)"] {
		t.Errorf("the pprof functions of the overloads: %v, want three apart", ids)
	}
	want := fmt.Sprintf("%x", elfBuildID(t, fx))
	var found bool
	for _, m := range p.Mapping {
		if m.File == fx {
			found = true
			if m.BuildID != want {
				t.Errorf("mapping of %s: build id %q, want %q", fx, m.BuildID, want)
			}
		}
	}
	if !found {
		t.Fatalf("no mapping of %s in the pprof file: %v", fx, p.Mapping)
	}
	for _, s := range p.Sample {
		for _, l := range s.Location {
			if slices.Contains(full, l.Line[0].Function.Name) && (l.Mapping == nil || l.Mapping.File != fx || l.Address < l.Mapping.Start || l.Address >= l.Mapping.Limit) {
				t.Fatalf("location of %s: address 0x%x, mapping %v", l.Line[0].Function.Name, l.Address, l.Mapping)
			}
		}
	}
	if goBin, err := exec.LookPath("go"); err == nil {
		raw, err := exec.Command(goBin, "tool", "pprof", "-raw", pb).CombinedOutput()
		if err != nil {
			t.Fatalf("go tool pprof -raw: %v\n%s", err, raw)
		}
		if !strings.Contains(string(raw), fx) || !strings.Contains(string(raw), want) || strings.Contains(string(raw), "Main binary filename not available") {
			t.Errorf("go tool pprof -raw lists no mapping of %s (build id %s):\n%s", fx, want, raw)
		}
	}
}

// elfBuildID is the build id of the ELF file at path.
func elfBuildID(t *testing.T, path string) []byte {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	id := symbols.BuildID(f)
	if len(id) == 0 {
		t.Fatalf("%s has no build id", path)
	}
	return id
}

// A stripped Go program (-ldflags='-s -w': no .symtab) is named from its
// .gopclntab: main.c under main.b, main.a and main.main.
func TestGoStripped(t *testing.T) {
	stacktest.RequireUnwinder(t)
	if runtime.GOARCH == "riscv64" {
		// Go keeps frame pointers on x86-64 and arm64 only, and a
		// stripped Go program has no .debug_frame: nothing to step by.
		t.Skip("riscv64: Go keeps no frame pointers here, and -ldflags=-w leaves no .debug_frame")
	}
	privtest.Require(t)
	fx := filepath.Join(stacktest.Fixtures(t), "gospin")
	f, err := elf.Open(fx)
	if err != nil {
		t.Fatal(err)
	}
	if f.Section(".symtab") != nil || f.Section(".gopclntab") == nil {
		t.Fatalf("%s: want a stripped Go program (.gopclntab, no .symtab)", fx)
	}
	f.Close()
	r := profileJSON(t, "-F", "199", "-c", fx+" 1")
	// Of the samples in main.c (the runtime's own, a larger share on a
	// slow machine, say nothing of the names), the chain named.
	var total, inC, whole uint64
	for _, st := range r.Stacks {
		if st.Comm != "gospin" {
			continue
		}
		total += st.Count
		i := slices.Index(st.User, "main.c")
		if i < 0 {
			continue
		}
		inC += st.Count
		if len(st.User) >= i+4 && slices.Equal(st.User[i+1:i+4], []string{"main.b", "main.a", "main.main"}) {
			whole += st.Count
		}
	}
	t.Logf("%d of gospin's %d samples in main.c (%d in all) in main.c <- main.b <- main.a <- main.main", whole, inC, total)
	if inC < 100 || whole < inC*95/100 {
		t.Errorf("%d of gospin's %d samples in main.c in main.c <- main.b <- main.a <- main.main, want at least 95%% of 100 or more:\n%v", whole, inC, r.Stacks)
	}
}

// TestSignalFrames profiles programs that spend their time in a signal
// handler (stacks/testdata/signal.c, no frame pointers): the handler's stack runs
// through the kernel's signal frame (the trampoline __restore_rt) into
// the code the signal interrupted, and on to the program's start. A timer
// signal (SIGALRM, SIGPROF) interrupting b; a SIGSEGV raised by the
// indirect jump of a PLT stub (the interrupted pc is the stub's first
// instruction: looked up as pc-1, as a return address is, it would be
// the entry before it). glibc's trampoline has a CFA expression, musl's no
// unwind row at all: both are known by their code. musl's libc has no
// unwind tables, so its stacks end at libc's start routine, one frame
// above main. On arm64 the trampoline is the vdso's, which has no unwind
// table and a frame record that holds the interrupted x30, not its pc; and
// the PLT stub has no unwind row but the one profile writes for it (its
// return address still in x30).
func TestSignalFrames(t *testing.T) {
	stacktest.RequireUnwinder(t)
	privtest.Require(t)
	dir := stacktest.Fixtures(t)
	for _, c := range []struct{ name, bin, mode string }{
		{"alrm", "signal", "alrm"},
		{"prof", "signal", "prof"},
		{"plt", "signal", "plt"},
		{"musl-alrm", "musl/signal", "alrm"},
		{"musl-plt", "musl/signal", "plt"},
		{"musl-static", "musl/signal-static", "alrm"},
	} {
		t.Run(c.name, func(t *testing.T) {
			fx := filepath.Join(dir, c.bin)
			stacktest.HaveFixture(t, fx)
			want := []string{"hc", "hb", "on_signal", "__restore_rt", "b", "a", "main"}
			if c.mode == "plt" {
				want = slices.Insert(want, 4, "getppid@plt")
			}
			musl := strings.HasPrefix(c.bin, "musl/")
			r := profileJSON(t, "-F", "199", "-c", fx+" "+c.mode+" 1.5")
			// The handler's samples are those in hc, its spin (named by
			// the pc, no unwinding needed); on_signal's and hb's few
			// instructions (2-3% in the 5.10 guest) are not counted.
			var inHandler, whole, inLibc uint64
			for _, st := range r.Stacks {
				i := slices.Index(st.User, "hc")
				if st.Comm != filepath.Base(c.bin) || i < 0 {
					continue
				}
				if j := i + 3; j < len(st.User) && stacks.IsSigreturn(st.User[j]) {
					st.User[j] = "__restore_rt" // arm64's vdso names it __kernel_rt_sigreturn where its symbols are read, riscv64's __vdso_rt_sigreturn
				}
				// musl: the signal came in libc's code, which has no
				// unwind rows, and the stack ends there, by musl's design
				// (the 6.1 guest's CI: 12 of 201 samples, 11 in an unnamed
				// function of the static binary's libc, 1 in __ofl_lock).
				if musl && st.End == "[unwind error: no unwind row]" && len(st.User) == i+5 && !slices.Contains(want, st.User[i+4]) {
					inLibc += st.Count
					continue
				}
				inHandler += st.Count
				if len(st.User) < i+len(want) || !slices.Equal(st.User[i:i+len(want)], want) {
					continue
				}
				rest := st.User[i+len(want):]
				switch {
				case !musl && st.End == "complete" && len(rest) > 0 && rest[len(rest)-1] == "_start":
				case musl && st.End == "[unwind error: no unwind row]" && len(rest) == 1 && (c.name != "musl-static" || rest[0] == "libc_start_main_stage2"):
				default:
					continue
				}
				whole += st.Count
			}
			t.Logf("%d of %d samples in the handler whole: %v (%d more interrupted in musl's libc)", whole, inHandler, want, inLibc)
			// hc spins 70% of the time (timers) or more (plt): 210 of 1.5
			// s at 199 Hz, fewer where the host is busy (perf's timer of
			// a qemu guest whose CPU waits for the host's fires late).
			if inHandler < 100 || float64(whole) < 0.95*float64(inHandler) {
				t.Errorf("%d of %d samples in the handler have the whole chain, want at least 95%% of 100 or more", whole, inHandler)
				for _, st := range r.Stacks {
					t.Logf("%d %s %v | %v", st.Count, st.End, st.User, st.Kernel)
				}
			}
		})
	}
}

// wholeChain profiles the chain fixture fx for 1.5 s: at least 95% of
// its samples in c (100 or more) have the whole chain from _start.
func wholeChain(t *testing.T, fx string) {
	t.Helper()
	r := profileJSON(t, "-F", "199", "-c", fx+" 1.5")
	share, n := chainShare(r, filepath.Base(fx), true)
	t.Logf("%.1f%% of %d samples in c whole", 100*share, n)
	if n < 100 || share < 0.95 {
		t.Errorf("%.1f%% of %d samples in c have the whole chain, want at least 95%% of 100 or more", 100*share, n)
		for _, st := range r.Stacks {
			t.Logf("%d %s %v", st.Count, st.End, st.User)
		}
	}
}

// TestRealignedStack profiles stacks/testdata/realign.c, whose b realigns its
// frame through a dynamic realign argument pointer (gcc's DRAP: CFA =
// *(rbp - 8), the caller's rbp = *(rbp), a CFA expression that
// dereferences): at least 95% of the samples in c have the whole chain
// c <- b <- a <- main from _start. Before, the walk stopped at b
// ("unsupported unwind rule"). arm64 has no DRAP: gcc keeps b's frame
// record and takes the CFA from x29, and the aligned buffer above it.
func TestRealignedStack(t *testing.T) {
	stacktest.RequireUnwinder(t)
	privtest.Require(t)
	fx := filepath.Join(stacktest.Fixtures(t), "realign")
	wholeChain(t, fx)
}

// TestNoReturnCaller profiles stacks/testdata/noreturn.c, whose b calls c,
// which never returns, as its last instruction, the function after right
// behind it (so gcc made a's call of b its last too): the return address
// of b's frame is after's first byte, of a's frame main's. Named by the
// call before them, as perf names callers, at least 95% of the samples
// in c have the whole chain c, b, a, main (before: c, after, main, main).
func TestNoReturnCaller(t *testing.T) {
	stacktest.RequireUnwinder(t)
	privtest.Require(t)
	fx := filepath.Join(stacktest.Fixtures(t), "noreturn")
	f, err := elf.Open(fx)
	if err != nil {
		t.Fatal(err)
	}
	syms, err := f.Symbols()
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	end := map[string]uint64{}
	start := map[string]uint64{}
	for _, s := range syms {
		end[s.Name], start[s.Name] = s.Value+s.Size, s.Value
	}
	if end["b"] != start["after"] {
		t.Fatalf("%s: b ends at 0x%x, after starts at 0x%x: want them adjacent (build.sh's flags)", fx, end["b"], start["after"])
	}
	wholeChain(t, fx)
}

// TestThreadAndVfork profiles the chain a -> b -> c (stacks/testdata/forms.c, no
// frame pointers) run by a thread, whose stack ends at the thread's root
// in libc (glibc's start_thread, then clone3, which marks itself the
// outermost frame; named where libc's debug file is installed, as on the
// host, else libc.so.6+0x...), and by a vfork child, which runs on its
// parent's stack, through main to _start: at least 95% of the samples in
// c whole, either way.
func TestThreadAndVfork(t *testing.T) {
	stacktest.RequireUnwinder(t)
	privtest.Require(t)
	fx := filepath.Join(stacktest.Fixtures(t), "forms")
	for _, form := range []string{"thread", "vfork"} {
		t.Run(form, func(t *testing.T) {
			want, root := []string{"c", "b", "a", "run"}, "clone"
			if form == "vfork" {
				want, root = []string{"c", "b", "a", "main"}, "_start"
			}
			r := profileJSON(t, "-F", "199", "-c", fx+" "+form+" 1.5")
			var inC, whole uint64
			for _, st := range r.Stacks {
				i := slices.Index(st.User, "c")
				if st.Comm != "forms" || i < 0 {
					continue
				}
				inC += st.Count
				ended := st.End == "complete" || st.End == "frame pointers"
				// Debian 12's riscv64 libc (gcc 12: no unwind tables unless
				// asked) has no row for start_thread, the thread's root:
				// there the stack ends below run, in libc, for want of one.
				if form == "thread" && runtime.GOARCH == "riscv64" && st.End == "[unwind error: no unwind row]" {
					ended = true
				}
				if !ended || len(st.User) < i+len(want) || !slices.Equal(st.User[i:i+len(want)], want) {
					continue
				}
				last := st.User[len(st.User)-1]
				if len(st.User) == i+len(want) && form == "thread" {
					continue // the thread's root is libc's, below run
				}
				if !strings.Contains(last, root) && !(form == "thread" && strings.HasPrefix(last, "libc.so")) {
					continue
				}
				whole += st.Count
			}
			t.Logf("%d of %d samples in c whole: %v ... %s", whole, inC, want, root)
			if inC < 100 || float64(whole) < 0.95*float64(inC) {
				t.Errorf("%d of %d samples in c have the whole chain, want at least 95%% of 100 or more", whole, inC)
				for _, st := range r.Stacks {
					t.Logf("%d %s %v", st.Count, st.End, st.User)
				}
			}
		})
	}
}

// TestPreload: with -c, profile reads the tables of the command's files
// (its executable, interpreter and libraries, as ldso.Files finds them)
// before it releases the command, but for those the shell that runs the
// line has mapped already (read at its scan): tls, its three libraries
// found through DT_RUNPATH's $ORIGIN, and, under busybox's static shell
// in the matrix's guests, the loader and libc too.
func TestPreload(t *testing.T) {
	stacktest.RequireUnwinder(t)
	privtest.Require(t)
	for _, exe := range []string{"tls", "musl/tls"} {
		t.Run(exe, func(t *testing.T) {
			path := filepath.Join(stacktest.Fixtures(t), exe)
			stacktest.HaveFixture(t, path)
			files, err := ldso.Files(path, nil)
			if err != nil {
				t.Fatal(err)
			}
			shell, err := ldso.Files("/bin/sh", nil)
			if err != nil {
				t.Fatal(err)
			}
			mapped := map[[2]uint64]bool{}
			for _, f := range shell {
				mapped[fileID(t, f)] = true
			}
			want := 0
			for _, f := range files {
				if !mapped[fileID(t, f)] {
					want++
				}
			}
			res := tooltest.Run(t, tooltest.Tool(t, "profile"), "-F", "99", "-c", path+" 0.1 0.1")
			line := fmt.Sprintf("; %d files of the command read before it started\n", want)
			if res.Status != 0 || !strings.Contains(res.Stdout, line) {
				t.Errorf("exit %d; want %q (%v, the shell's %v) in:\n%s%s", res.Status, line, files, shell, res.Stdout, res.Stderr)
			}
		})
	}
}

// fileID is the device and inode of path, through symbolic links.
func fileID(t *testing.T, path string) [2]uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return [2]uint64{st.Dev, st.Ino}
}

// TestShortLivedProcesses profiles the whole machine while 30 processes
// run one after another, 80 ms each (the chain spinning in c from its
// first millisecond): their first samples come before profile has read
// their mappings, and the in-kernel unwinder defers them to user space
// with a copy of the stack, unwound once the tables are read. At least
// 95% of their samples in c have the whole chain (it was 83% to 92%, the
// rest cut short, or frame-pointer garbage in auto mode).
func TestShortLivedProcesses(t *testing.T) {
	privtest.Require(t)
	// The matrix's guests (TRACEKIT_BIN) are emulated; their CPU model
	// is not always named QEMU (not on an AMD EPYC host).
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil && strings.Contains(string(b), "QEMU Virtual CPU") || os.Getenv("TRACEKIT_BIN") != "" {
		// Emulated 20 to 50 times slower, profile reads a process's maps
		// after the 80 ms process has exited: its samples cannot be named.
		t.Skip("under qemu's TCG the 80 ms processes exit before profile reads their maps")
	}
	fx := filepath.Join(stacktest.Fixtures(t), "chain-pie")
	cmd := exec.Command(tooltest.Tool(t, "profile"), "--json", "-F", "199")
	stderr, _ := cmd.StderrPipe()
	var stdout strings.Builder
	cmd.Stdout = &stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	errs := bufio.NewReader(stderr)
	for { // notices (5.10's small keys) come before "Tracing"
		line, err := errs.ReadString('\n')
		if err != nil {
			t.Fatalf("profile did not start: %q %v", line, err)
		}
		if strings.HasPrefix(line, "Tracing") {
			break
		}
	}
	for i := 0; i < 30; i++ {
		if out, err := exec.Command(fx, "0.08", "user", "now").CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", fx, err, out)
		}
	}
	cmd.Process.Signal(syscall.SIGINT)
	rest, _ := io.ReadAll(errs)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("profile: %v\n%s", err, rest)
	}
	var r report
	if err := json.Unmarshal([]byte(stdout.String()), &r); err != nil {
		t.Fatalf("%v\n%s", err, stdout.String())
	}
	share, n := chainShare(r, "chain-pie", true)
	var fp uint64
	for _, st := range r.Stacks {
		if st.Comm == "chain-pie" && st.End == "frame pointers" {
			fp += st.Count
		}
	}
	t.Logf("%d samples of 30 chain-pie processes in c, %.1f%% whole chain; %d by frame pointers", n, 100*share, fp)
	// A frame-pointer step is marked; one sample in some 500 has been seen
	// taking one (its pc in no mapping of the process: not explained yet).
	if n < 100 || share < 0.95 || 100*fp > uint64(n) {
		t.Errorf("%.1f%% of %d samples have the whole chain, %d stepped by frame pointers; want at least 95%% of 100 or more, at most 1%% by frame pointers", 100*share, n, fp)
		for _, st := range r.Stacks {
			if st.Comm == "chain-pie" {
				t.Logf("%d %s %v", st.Count, st.End, st.User)
			}
		}
	}
}

// TestDeepStacks: a stack deeper than a key keeps (prog.UserFrames, or
// what profile says it keeps where the kernel takes keys of 512 bytes at
// most) ends [truncated] with exactly that many frames, innermost first;
// one of ten frames fewer is whole, through main. A frame-pointer walk
// (--unwind=fp, bpf_get_stack) is cut at kernel.perf_event_max_stack if
// that is fewer, and marked so too.
func TestDeepStacks(t *testing.T) {
	privtest.Require(t)
	stacktest.RequireUnwinder(t)
	fx := filepath.Join(stacktest.Fixtures(t), "deep")
	keep := prog.UserFrames
	maxStack := 127
	if b, err := os.ReadFile("/proc/sys/kernel/perf_event_max_stack"); err == nil {
		maxStack, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	for _, c := range []struct {
		mode  string
		extra int // user frames past the limit (negative: below it)
		whole bool
	}{{"auto", -10, true}, {"auto", 20, false}, {"fp", 20, false}} {
		limit := keep
		if c.mode == "fp" {
			limit = min(keep, maxStack)
		}
		// The fixture's DEPTH calls of d are DEPTH + 5 user frames: spin,
		// then main and libc's start below them.
		depth := limit + c.extra - 5
		args := []string{"--json", "-F", "199", "--unwind", c.mode, "-c", fmt.Sprintf("%s %d 1", fx, depth)}
		res := tooltest.Run(t, tooltest.Tool(t, "profile"), args...)
		if m := regexp.MustCompile(`cut at \d+ kernel and (\d+) user frames`).FindStringSubmatch(res.Stderr); m != nil && keep == prog.UserFrames {
			keep, _ = strconv.Atoi(m[1])
			limit = keep
			if c.mode == "fp" {
				limit = min(keep, maxStack)
			}
			depth = limit + c.extra - 5
			args[len(args)-1] = fmt.Sprintf("%s %d 1", fx, depth)
			res = tooltest.Run(t, tooltest.Tool(t, "profile"), args...)
		}
		var r report
		if err := json.Unmarshal([]byte(res.Stdout), &r); res.Status != 0 || err != nil {
			t.Fatalf("%s, deep %d: exit %d, %v\n%s", c.mode, depth, res.Status, err, res.Stderr)
		}
		var in, good int
		for _, st := range r.Stacks {
			if st.Comm != "deep" || len(st.User) == 0 || st.User[0] != "spin" {
				continue
			}
			in += int(st.Count)
			if c.whole && st.End == "complete" && slices.Contains(st.User, "main") && len(st.User) == depth+5 ||
				!c.whole && st.End == "[truncated]" && len(st.User) == limit && !slices.Contains(st.User, "main") {
				good += int(st.Count)
			}
		}
		t.Logf("%s, deep %d (%d user frames, %d kept): %d of %d samples in spin as expected", c.mode, depth, depth+5, limit, good, in)
		// 50 samples at least: deep spins a second of the wall clock,
		// and riscv64's guest beside two others gave it half a CPU (99 in
		// spin, all 99 whole; 166 to 190 in the other guests).
		if in < 50 || good*10 < in*9 {
			t.Errorf("%s, deep %d: %d of %d samples in spin %s; want 90%% of 50 or more", c.mode, depth, good, in, map[bool]string{true: "whole through main", false: fmt.Sprintf("[truncated] at %d frames", limit)}[c.whole])
			logStacks(t, r.Stacks)
		}
	}
}

// TestBigLibrary profiles a process linking Debian's libLLVM-14 (the
// llvm fixture, built here) at the default settings: its files' tables
// (libLLVM's 948,864 rows, libz3's 386,222, ...) are more than the 8 MiB
// table profile once had, and are all loaded, none left out; 95% of its
// samples or more are whole, to _start, and libLLVM's functions are named.
func TestBigLibrary(t *testing.T) {
	privtest.Require(t)
	if os.Getenv("TRACEKIT_BIN") != "" {
		t.Skip("libLLVM-14 is on the host, not in the matrix's guests")
	}
	const lib = "/usr/lib/x86_64-linux-gnu/libLLVM-14.so.1"
	tooltest.Install(t, "libllvm14 gcc", func() bool {
		_, err := os.Stat(lib)
		_, errCC := exec.LookPath("gcc")
		return err == nil && errCC == nil
	})
	fx := filepath.Join(t.TempDir(), "llvm")
	if out, err := exec.Command("gcc", "-O2", "-o", fx, "../stacks/testdata/llvm.c", "-l:libLLVM-14.so.1").CombinedOutput(); err != nil {
		t.Fatalf("build the llvm fixture: %v\n%s", err, out)
	}
	res := tooltest.Run(t, tooltest.Tool(t, "profile"), "-F", "199", "-c", fx+" 2")
	if res.Status != 0 {
		t.Fatalf("exit %d\n%s%s", res.Status, res.Stdout, res.Stderr)
	}
	m := regexp.MustCompile(`(?m)^(\d+) samples, \d+ stacks; user stacks complete: (\d+) `).FindStringSubmatch(res.Stdout)
	tables := regexp.MustCompile(`(?m)^unwind tables: (\d+) files, (\d+) rows`).FindStringSubmatch(res.Stdout)
	if m == nil || tables == nil {
		t.Fatalf("no summary:\n%s", res.Stdout)
	}
	samples, _ := strconv.Atoi(m[1])
	complete, _ := strconv.Atoi(m[2])
	rows, _ := strconv.Atoi(tables[2])
	t.Logf("%d of %d samples complete; %s files, %d rows", complete, samples, tables[1], rows)
	if samples < 200 || float64(complete) < 0.95*float64(samples) {
		t.Errorf("%d of %d samples complete, want 95%% of 200 or more", complete, samples)
	}
	if rows <= 8<<20/8 || strings.Contains(res.Stdout, "left out") || strings.Contains(res.Stdout, "refused") {
		t.Errorf("%d rows loaded, want more than the 1,048,576 of 8 MiB and no file left out or refused:\n%s", rows, res.Stdout)
	}
	if !strings.Contains(res.Stdout, "llvm::LLVMContext::LLVMContext()") || !strings.Contains(res.Stdout, "_start") {
		t.Errorf("no frame named llvm::LLVMContext::LLVMContext() or _start:\n%s", res.Stdout)
	}
}

// TestUserOrKernelOnly: -U reports the user frames alone, -K the kernel's
// alone (BCC's profile -U and -K), every sample still counted: a workload
// of reads from /dev/zero is in both.
func TestUserOrKernelOnly(t *testing.T) {
	privtest.Require(t)
	work := tooltest.Writes(t, 1, 300000)
	for _, flag := range []string{"-U", "-K"} {
		r := profileJSON(t, flag, "-F", "499", "-c", work)
		n := 0
		for _, st := range r.Stacks {
			n += int(st.Count)
			// -K: no user frames, and no end of theirs ("complete", or
			// "frame pointers" where the walk is by frame pointers only).
			if flag == "-U" && len(st.Kernel) > 0 || flag == "-K" && (len(st.User) > 0 || st.End != "complete" && st.End != "frame pointers") {
				t.Errorf("%s: stack with kernel %q, user %q, end %q", flag, st.Kernel, st.User, st.End)
			}
		}
		if n != r.Samples || n == 0 {
			t.Errorf("%s: %d samples in the stacks, %d counted", flag, n, r.Samples)
		}
	}
	if res := tooltest.Run(t, tooltest.Tool(t, "profile"), "-U", "-K"); res.Status != 2 {
		t.Errorf("-U -K: exit %d, want 2: %s", res.Status, res.Stderr)
	}
}

// TestOutputToFIFO: --svg and --pprof to a FIFO are refused before the
// run (issue 62: opened read-write, a small output sat in the pipe unread
// and a large one blocked the tool's end for good); nothing is left
// attached.
func TestOutputToFIFO(t *testing.T) {
	privtest.Require(t)
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, flag := range []string{"--svg", "--pprof"} {
		res := tooltest.Run(t, tooltest.Tool(t, "profile"), flag, fifo, "-c", "true")
		if res.Status != 2 || !strings.Contains(res.Stderr, "is a FIFO or a socket: the file is written whole when the run ends") {
			t.Errorf("%s FIFO: exit %d, stderr %q", flag, res.Status, res.Stderr)
		}
	}
}

// TestCPUAndThread: -C samples only the CPUs it names (a spinner pinned
// to another CPU has exactly no samples; on its own CPU, its share) and
// refuses one that is not online; -L samples one thread on whichever CPU
// it runs: of a process whose second thread spins while its main thread
// sleeps, -L of the spinner has its samples and -L of the sleeper none
// (by the threads, not their stacks, which riscv64's and armv7's walks
// do not take past the spinning leaf).
func TestCPUAndThread(t *testing.T) {
	privtest.Require(t)
	dir := stacktest.Fixtures(t)
	online, err := perfevent.OnlineCPUs()
	if err != nil {
		t.Fatal(err)
	}
	samplesOf := func(r report, pid int, in string) (n int) {
		for _, st := range r.Stacks {
			if int(st.Pid) == pid && (in == "" || slices.Contains(st.User, in)) {
				n += int(st.Count)
			}
		}
		return n
	}
	start := func(t *testing.T, args ...string) *exec.Cmd {
		cmd := exec.Command(filepath.Join(dir, args[0]), args[1:]...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd
	}
	t.Run("cpu", func(t *testing.T) {
		spin := start(t, "chain-pie", "60", "user") // killed at the end
		pid := spin.Process.Pid
		last := online[len(online)-1]
		if len(online) > 1 {
			var set unix.CPUSet
			set.Set(last)
			if err := unix.SchedSetaffinity(pid, &set); err != nil {
				t.Fatal(err)
			}
			r := profileJSON(t, "-C", strconv.Itoa(online[0]), "-p", strconv.Itoa(pid), "-F", "199", "1", "1")
			if n := samplesOf(r, pid, ""); n != 0 {
				t.Errorf("-C %d: %d samples of a spinner pinned to CPU %d, want 0", online[0], n, last)
			}
		}
		// Its own CPU: samples of it (20 at least of the second's 199: in
		// armv7's guest beside two others the spinner had 40).
		r := profileJSON(t, "-C", strconv.Itoa(last), "-p", strconv.Itoa(pid), "-F", "199", "1", "1")
		if n := samplesOf(r, pid, ""); n < 20 {
			t.Errorf("-C %d: %d samples of the spinner on its CPU, want 20 or more of 199", last, n)
		}
		off := strconv.Itoa(last + 1)
		res := tooltest.Run(t, tooltest.Tool(t, "profile"), "-C", off, "-p", strconv.Itoa(pid), "1", "1")
		if want := "CPU " + off + " is not online"; res.Status != 2 || !strings.Contains(res.Stderr, want) {
			t.Errorf("-C %s: exit %d, stderr %q; want 2 and %q", off, res.Status, res.Stderr, want)
		}
	})
	t.Run("thread", func(t *testing.T) {
		// A process whose main thread sleeps while its second spins:
		// -L of the spinner has its samples, -L of the sleeper none.
		cmd := exec.Command("/bin/sh", "-c", "exec env "+tooltest.SpinThread(t, 60)) // its pid the workload's
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		var sleeper, spinner int
		if _, err := fmt.Fscan(out, &sleeper, &spinner); err != nil {
			t.Fatalf("the workload's thread ids: %v", err)
		}
		pid := cmd.Process.Pid
		spun := profileJSON(t, "-L", strconv.Itoa(spinner), "-F", "199", "1", "1")
		slept := profileJSON(t, "-L", strconv.Itoa(sleeper), "-F", "199", "1", "1")
		if a, b := samplesOf(spun, pid, ""), samplesOf(slept, pid, ""); a < 20 || b > 2 {
			t.Errorf("-L: %d samples of the spinning thread %d, %d of the sleeping %d; want 20 or more, and 2 at most", a, spinner, b, sleeper)
			logStacks(t, append(spun.Stacks, slept.Stacks...))
		}
		res := tooltest.Run(t, tooltest.Tool(t, "profile"), "-L", strconv.Itoa(spinner), "-p", "1", "1", "1")
		if want := fmt.Sprintf("is a thread of process %d, not of -p 1", pid); res.Status != 2 || !strings.Contains(res.Stderr, want) {
			t.Errorf("-L %d -p 1: exit %d, stderr %q; want 2 and %q", spinner, res.Status, res.Stderr, want)
		}
	})
}
