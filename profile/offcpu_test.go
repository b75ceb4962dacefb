package profile

import (
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/tracekit/tracekit/internal/privtest"
)

// offCPUChains sums the microseconds the report counts under main -> a and
// under main -> b (testdata/offcpu.c) and checks, where the in-kernel
// unwinder runs (x86-64), that each of those stacks is whole: complete,
// from the wait up to _start.
func offCPUChains(t *testing.T, r report) (a, b int) {
	t.Helper()
	for _, st := range r.Stacks {
		if st.Comm != "offcpu" {
			continue
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
		if runtime.GOARCH == "amd64" && (st.End != "complete" || st.User[len(st.User)-1] != "_start") {
			t.Errorf("a stack of %d us ends %q, not whole to _start: %v", st.Count, st.End, st.User)
		}
		if len(st.Kernel) == 0 {
			t.Errorf("a stack of %d us has no kernel frames (the wait's)", st.Count)
		}
	}
	return a, b
}

// within checks that got microseconds are want milliseconds within 10%.
func within(t *testing.T, what string, got int, want time.Duration) {
	t.Helper()
	w := int(want / time.Microsecond)
	if got < w*9/10 || got > w*11/10 {
		t.Errorf("%s: %d us counted, want %d within 10%%", what, got, w)
	}
}

// TestOffCPU runs --off-cpu on testdata/offcpu.c, which waits 100 ms in
// nanosleep under main -> a and 300 ms in a pipe's read under main -> b,
// three rounds: the time counted under each chain is the truth within
// 10%, in the report (microseconds) and in the pprof file (nanoseconds,
// "off-cpu"). Where the in-kernel unwinder runs (x86-64), at least 95% of
// the time the fixture's processes waited has whole stacks, the first
// waits too: the forked children wait once, before profile has read
// them (their stacks are deferred to user space). --min-block 200 ms
// leaves a's waits out and keeps b's; --max-block 200 ms the other way
// round.
func TestOffCPU(t *testing.T) {
	privtest.Require(t)
	fx := filepath.Join(fixtures(t), "offcpu")
	pb := filepath.Join(t.TempDir(), "off.pb.gz")
	r := profileJSON(t, "--off-cpu", "--pprof", pb, "-c", fx+" 3")
	a, b := offCPUChains(t, r)
	t.Logf("main -> a: %d us, main -> b: %d us, all: %d us", a, b, r.Usecs)
	within(t, "main -> a", a, 300*time.Millisecond)
	within(t, "main -> b", b, 900*time.Millisecond)
	var sum, fixture, whole int
	for _, st := range r.Stacks {
		sum += int(st.Count)
		if st.Comm == "offcpu" {
			fixture += int(st.Count)
			if st.End == "complete" && len(st.User) > 0 && st.User[len(st.User)-1] == "_start" {
				whole += int(st.Count)
			}
		}
	}
	t.Logf("the fixture's processes waited %d us, %d of them with whole stacks", fixture, whole)
	if runtime.GOARCH == "amd64" && whole < fixture*95/100 {
		t.Errorf("%d of the fixture's %d us waited have whole stacks, want at least 95%%:\n%v", whole, fixture, r.Stacks)
	}
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
	within(t, "pprof, main -> a", int(pa/1000), 300*time.Millisecond)
	within(t, "pprof, main -> b", int(pbn/1000), 900*time.Millisecond)

	t.Run("min-block", func(t *testing.T) {
		a, b := offCPUChains(t, profileJSON(t, "--off-cpu", "-m", "200000", "-c", fx+" 3"))
		if a != 0 {
			t.Errorf("main -> a: %d us counted, want none: its waits of 100 ms are below --min-block", a)
		}
		within(t, "main -> b", b, 900*time.Millisecond)
	})
	t.Run("max-block", func(t *testing.T) {
		a, b := offCPUChains(t, profileJSON(t, "--off-cpu", "-M", "200000", "-c", fx+" 3"))
		within(t, "main -> a", a, 300*time.Millisecond)
		if b != 0 {
			t.Errorf("main -> b: %d us counted, want none: its waits of 300 ms are above --max-block", b)
		}
	})
}
