package profile

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/tracekit/tracekit/internal/stacktest"

	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/internal/tooltest"
)

// offCPUChains sums the microseconds the report counts under main -> a and
// under main -> b (stacks/testdata/offcpu.c) and checks, where the in-kernel
// unwinder runs (x86-64), that every stack of the fixture's that waited
// 50 ms or more (its sleeps, the forked children's too) is whole
// (complete, from the wait up to _start), and 95% of the chains' time.
// A short preemption in a file profile has not read yet may end early:
// only a sleep's stack is deferred to user space.
func offCPUChains(t *testing.T, r report) (a, b int) {
	t.Helper()
	var cut int
	for _, st := range r.Stacks {
		if st.Comm != "offcpu" {
			continue
		}
		whole := st.End == "complete" && len(st.User) > 0 && st.User[len(st.User)-1] == "_start"
		// A wait of the dynamic loader, before the program runs (paging
		// in a library: 259 ms once in the 7.2 guest of the CI of
		// cc25766), ends at the loader's entry, whose code has no unwind
		// rows: perf's stacks end there too.
		loader := st.End == "[unwind error: no unwind row]" && len(st.User) > 0 && strings.HasPrefix(st.User[len(st.User)-1], "ld-linux")
		if loader && st.Count >= 50000 {
			t.Logf("a wait of %d us in the loader's start, before main: %v", st.Count, st.User)
		}
		// riscv64's libc has no unwind rows for some of its functions:
		// a fork's wait in _Fork (62 ms in the guest beside two others, in
		// the CI of fc28fd2) ends there, as perf's stack would.
		noRow := runtime.GOARCH == "riscv64" && st.End == "[unwind error: no unwind row]"
		if noRow && st.Count >= 50000 {
			t.Logf("a wait of %d us where riscv64's libc has no unwind row: %v", st.Count, st.User)
		}
		if st.Count >= 50000 && !whole && !loader && !noRow {
			t.Errorf("a wait of %d us ends %q, not whole to _start: %v", st.Count, st.End, st.User)
		}
		var sum *int
		for _, f := range []string{"a", "b"} {
			if i := slices.Index(st.User, f); i >= 0 && i+1 < len(st.User) && st.User[i+1] == "main" {
				sum = &a
				if f == "b" {
					sum = &b
				}
			}
		}
		if sum == nil {
			continue
		}
		*sum += int(st.Count)
		if !whole {
			cut += int(st.Count)
		}
		if len(st.Kernel) == 0 {
			t.Errorf("a stack of %d us has no kernel frames (the wait's)", st.Count)
		}
	}
	if cut > (a+b)/20 {
		t.Errorf("%d of the %d us under main -> a and main -> b have stacks cut short, want at most 5%%", cut, a+b)
	}
	return a, b
}

// within checks that got microseconds are want within 10%.
func within(t *testing.T, what string, got, want int) {
	t.Helper()
	if err := near(what, got, want); err != nil {
		t.Error(err)
	}
}

func near(what string, got, want int) error {
	if got < want*9/10 || got > want*11/10 {
		return fmt.Errorf("%s: %d us counted, want %d within 10%%", what, got, want)
	}
	return nil
}

// offCPUTwice runs offCPURun, and once more if check finds the first
// run's figures off (logged): the clean-clone CI saw one of b's three
// waits missing once, with the host's other test packages running beside
// it, in 1 of 4 runs; 40 runs here since (quiet, CPU-loaded, beside
// filter's uprobe tests) were exact. A wrong count fails both runs.
func offCPUTwice(t *testing.T, fx string, check func(report, waited) error, args ...string) (report, waited) {
	t.Helper()
	r, w := offCPURun(t, fx, args...)
	if err := check(r, w); err != nil {
		t.Logf("first run off, run again: %v", err)
		r, w = offCPURun(t, fx, args...)
	}
	return r, w
}

// chainsNear checks main -> a and main -> b against the fixture's figures.
func chainsNear(r report, w waited) error {
	a, b := chainSums(r)
	return errors.Join(near("main -> a", a, w.a), near("main -> b", b, w.b))
}

// chainSums is the microseconds under main -> a and under main -> b.
func chainSums(r report) (a, b int) {
	for _, st := range r.Stacks {
		if st.Comm != "offcpu" {
			continue
		}
		for _, f := range []string{"a", "b"} {
			if i := slices.Index(st.User, f); i >= 0 && i+1 < len(st.User) && st.User[i+1] == "main" {
				if f == "a" {
					a += int(st.Count)
				} else {
					b += int(st.Count)
				}
			}
		}
	}
	return a, b
}

// waited is what stacks/testdata/offcpu.c measured of its own waits (its last
// line on stderr), in microseconds.
type waited struct{ a, b, child int }

// offCPURun runs profile --off-cpu --json with args on the fixture's
// three rounds, and returns the report and the fixture's own figures.
func offCPURun(t *testing.T, fx string, args ...string) (report, waited) {
	t.Helper()
	args = append([]string{"--json", "--off-cpu"}, append(args, "-c", fx+" 3")...)
	res := tooltest.Run(t, tooltest.Tool(t, "profile"), args...)
	if res.Status != 0 {
		t.Fatalf("profile %v: status %d\n%s", args, res.Status, res.Stderr)
	}
	var r report
	if err := json.Unmarshal([]byte(res.Stdout), &r); err != nil {
		t.Fatalf("profile %v: %v\n%s", args, err, res.Stdout)
	}
	var w waited
	i := strings.LastIndex(res.Stderr, "offcpu: a ")
	if i < 0 {
		t.Fatalf("the fixture did not say what it waited:\n%s", res.Stderr)
	}
	if n, _ := fmt.Sscanf(res.Stderr[i:], "offcpu: a %d us, b %d us, child %d us", &w.a, &w.b, &w.child); n != 3 {
		t.Fatalf("the fixture's figures: %q", res.Stderr[i:])
	}
	return r, w
}

// TestOffCPU runs --off-cpu on stacks/testdata/offcpu.c, which waits about 100 ms
// in nanosleep under main -> a and 300 ms in a pipe's read under main -> b
// (for a child that sleeps 300 ms), three rounds, and measures each wait
// itself: the time counted under each chain is the fixture's own figure
// within 10%, in the report (microseconds) and in the pprof file
// (nanoseconds, "off-cpu"). Where the in-kernel unwinder runs (x86-64),
// the fixture's long waits are whole, the first ones too: each forked
// child sleeps before profile has read it (its stack is deferred to user
// space). --min-block 200 ms leaves a's waits out and keeps b's;
// --max-block 200 ms the other way round (b's preemptions, short, may
// stay).
func TestOffCPU(t *testing.T) {
	stacktest.RequireUnwinder(t)
	privtest.Require(t)
	fx := filepath.Join(stacktest.Fixtures(t), "offcpu")
	pb := filepath.Join(t.TempDir(), "off.pb.gz")
	r, w := offCPUTwice(t, fx, chainsNear, "--pprof", pb)
	a, b := offCPUChains(t, r)
	t.Logf("main -> a: %d us, main -> b: %d us, all: %d us; the fixture measured a %d, b %d, children %d", a, b, r.Usecs, w.a, w.b, w.child)
	within(t, "main -> a", a, w.a)
	within(t, "main -> b", b, w.b)
	var sum, children int
	for _, st := range r.Stacks {
		sum += int(st.Count)
		if st.Comm == "offcpu" && slices.Contains(st.User, "child") {
			children += int(st.Count)
		}
	}
	within(t, "the forked children", children, w.child)
	if sum != r.Usecs || r.Samples != 0 {
		t.Errorf("the stacks sum to %d us, the report says usecs %d (and samples %d, want none)", sum, r.Usecs, r.Samples)
	}

	p := readPprof(t, pb)
	if len(p.SampleType) != 1 || p.SampleType[0].Type != "off-cpu" || p.SampleType[0].Unit != "nanoseconds" {
		t.Fatalf("pprof sample types %v, want [off-cpu/nanoseconds]", p.SampleType)
	}
	var pa, pbn int64
	for _, s := range p.Sample {
		for i, loc := range s.Location {
			if len(loc.Line) == 0 || i+1 >= len(s.Location) || len(s.Location[i+1].Line) == 0 || s.Location[i+1].Line[0].Function.Name != "main" {
				continue
			}
			switch loc.Line[0].Function.Name {
			case "a":
				pa += s.Value[0]
			case "b":
				pbn += s.Value[0]
			}
		}
	}
	within(t, "pprof, main -> a", int(pa/1000), w.a)
	within(t, "pprof, main -> b", int(pbn/1000), w.b)

	t.Run("min-block", func(t *testing.T) {
		r, w := offCPUTwice(t, fx, func(r report, w waited) error {
			_, b := chainSums(r)
			return near("main -> b", b, w.b)
		}, "-m", "200000")
		a, b := offCPUChains(t, r)
		if a != 0 {
			t.Errorf("main -> a: %d us counted, want none: its waits of 100 ms are below --min-block", a)
		}
		within(t, "main -> b", b, w.b)
	})
	t.Run("max-block", func(t *testing.T) {
		r, w := offCPUTwice(t, fx, func(r report, w waited) error {
			a, _ := chainSums(r)
			return near("main -> a", a, w.a)
		}, "-M", "200000")
		a, b := offCPUChains(t, r)
		within(t, "main -> a", a, w.a)
		if b > w.b/10 {
			t.Errorf("main -> b: %d us counted, want less than a tenth of %d: its waits of 300 ms are above --max-block", b, w.b)
		}
	})
}
